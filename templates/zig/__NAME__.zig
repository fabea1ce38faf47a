//! `__NAME__`: a Spool handler written in Zig (task type `__NAME__`), for Zig 0.17.
//!
//! Spool runs it as a plain WASI program: the task's JSON payload arrives on stdin, the result
//! is whatever the program prints on stdout, and the exit status tells how it went (0 = done;
//! anything else = failed, retried per the task type's policy, with the last line of stderr as
//! the reason). `spool plugin build` builds it for wasm32-wasi and puts __NAME__.wasm into the
//! plugin folder.
//!
//! This starter turns {"text": "hello"} into {"length": 5}.

const std = @import("std");
const Io = std.Io;

/// The largest payload read from stdin.
const max_payload = 16 << 20;

pub fn main(init: std.process.Init) u8 {
    const io = init.io;
    // Everything is allocated from an arena that lives as long as the program.
    const arena = init.arena.allocator();

    // Read the whole payload from stdin and decode it.
    var stdin_buffer: [4096]u8 = undefined;
    var stdin_reader: Io.File.Reader = .initStreaming(.stdin(), io, &stdin_buffer);
    const input = stdin_reader.interface.allocRemaining(arena, .limited(max_payload)) catch |err|
        return fail(io, "cannot read the payload: {t}", .{err});
    const payload = std.json.parseFromSliceLeaky(std.json.Value, arena, input, .{}) catch |err|
        return fail(io, "cannot decode the payload: {t}", .{err});
    const text = switch (payload) {
        .object => |object| switch (object.get("text") orelse .null) {
            .string => |text| text,
            else => return fail(io, "the payload needs a \"text\" string", .{}),
        },
        else => return fail(io, "the payload needs a \"text\" string", .{}),
    };

    // Do the work: count the characters (UTF-8 code points) of the text.
    const length = std.unicode.utf8CountCodepoints(text) catch text.len;

    // Print the result; returning 0 from main means success.
    var stdout_buffer: [4096]u8 = undefined;
    var stdout_writer: Io.File.Writer = .init(.stdout(), io, &stdout_buffer);
    const stdout = &stdout_writer.interface;
    std.json.Stringify.value(.{ .length = length }, .{}, stdout) catch return fail(io, "cannot write the result", .{});
    stdout.flush() catch return fail(io, "cannot write the result", .{});
    return 0;
}

/// Prints the reason on stderr and returns exit status 1, so Spool records the failure.
fn fail(io: Io, comptime format: []const u8, args: anytype) u8 {
    var buffer: [256]u8 = undefined;
    var stderr_writer: Io.File.Writer = .init(.stderr(), io, &buffer);
    const stderr = &stderr_writer.interface;
    stderr.print(format ++ "\n", args) catch {};
    stderr.flush() catch {};
    return 1;
}
