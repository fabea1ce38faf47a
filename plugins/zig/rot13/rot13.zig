//! `rot13`: a Spool handler written in Zig, a plain WASI program (task type `rot13`).
//! Built with `-target wasm32-wasi` it is a core module exporting `_start`.
//! Written for Zig 0.17.1 (`std.process.Init`, `std.Io` readers and writers).
//!
//! Reads the task's JSON payload on stdin and prints the result on stdout:
//! - `{"text": "Hello"}` → `{"text":"Uryyb"}`, exit status 0 (ASCII letters are rotated by
//!   13 places, every other byte is kept, so UTF-8 text passes through);
//! - a payload that is not a JSON object with a "text" string → a message on stderr, exit 2.
//! Spool retries any non-zero exit per the task type's policy, with the last line of stderr
//! as the reason.

const std = @import("std");
const Io = std.Io;

/// The largest payload read from stdin; Spool's own default limit is 1 MiB.
const max_payload = 16 << 20;

pub fn main(init: std.process.Init) u8 {
    const io = init.io;
    const arena = init.arena.allocator();

    var stdin_buffer: [4096]u8 = undefined;
    var stdin_reader: Io.File.Reader = .initStreaming(.stdin(), io, &stdin_buffer);
    const input = stdin_reader.interface.allocRemaining(arena, .limited(max_payload)) catch |err|
        return fail(io, "cannot read the payload from stdin: {t}", .{err});

    const payload = std.json.parseFromSliceLeaky(std.json.Value, arena, input, .{}) catch |err|
        return fail(io, "the payload is not JSON: {t}", .{err});
    const object = switch (payload) {
        .object => |object| object,
        else => return fail(io, "the payload must be a JSON object, got {t}", .{payload}),
    };
    const text = switch (object.get("text") orelse .null) {
        .string => |text| text,
        else => return fail(io, "the payload needs a \"text\" string", .{}),
    };

    const rotated = arena.alloc(u8, text.len) catch return fail(io, "out of memory", .{});
    for (text, rotated) |byte, *out| out.* = rot13(byte);

    var stdout_buffer: [4096]u8 = undefined;
    var stdout_writer: Io.File.Writer = .init(.stdout(), io, &stdout_buffer);
    const stdout = &stdout_writer.interface;
    std.json.Stringify.value(.{ .text = rotated }, .{}, stdout) catch
        return fail(io, "cannot write the result", .{});
    stdout.writeByte('\n') catch return fail(io, "cannot write the result", .{});
    stdout.flush() catch return fail(io, "cannot write the result", .{});
    return 0;
}

/// Rotates an ASCII letter by 13 places in its case's alphabet; other bytes are unchanged.
fn rot13(byte: u8) u8 {
    return switch (byte) {
        'a'...'z' => 'a' + (byte - 'a' + 13) % 26,
        'A'...'Z' => 'A' + (byte - 'A' + 13) % 26,
        else => byte,
    };
}

/// Prints a line on stderr and returns the exit status for a bad payload (2).
fn fail(io: Io, comptime format: []const u8, args: anytype) u8 {
    var buffer: [256]u8 = undefined;
    var stderr_writer: Io.File.Writer = .init(.stderr(), io, &buffer);
    const stderr = &stderr_writer.interface;
    stderr.print(format ++ "\n", args) catch {};
    stderr.flush() catch {};
    return 2;
}

test rot13 {
    try std.testing.expectEqual('n', rot13('a'));
    try std.testing.expectEqual('M', rot13('Z'));
    try std.testing.expectEqual('!', rot13('!'));
}
