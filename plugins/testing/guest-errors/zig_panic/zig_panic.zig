//! `zig_panic` (test program): panics in a called function, whatever its payload; the task's
//! error must show the panic's message.

const std = @import("std");

fn checkBalance(balance: i32) void {
    if (balance < 0) @panic("the ledger is corrupt: negative balance");
}

pub fn main(init: std.process.Init) u8 {
    _ = init;
    checkBalance(-1);
    return 0;
}
