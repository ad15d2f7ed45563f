#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_store_frame (see fuzz/fuzz_store_frame.c):
one valid frame stream per op, truncated and oversize frames, bad counts,
replies and hellos. Run from the repository root."""
import os
import struct

OUT = "fuzz/corpus/fuzz_store_frame"
PING, SET, GET, CHECK, WAIT, ADD, CAS, DELETE, NUM, APPEND, MGET, MSET = range(1, 13)


def b(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(s)) + s


def frame(op, body):
    return struct.pack("<IB", len(body) + 1, op) + body


def t(ms):
    return struct.pack("<q", ms)


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(b(k) for k in ks)


cases = {
    "ping": frame(PING, struct.pack("<q", 7)),
    "set_get": frame(SET, b("k") + b("v")) + frame(GET, t(0) + b("k")),
    "get_missing": frame(GET, t(10) + b("nope")),
    "check": frame(SET, b("a") + b("1")) + frame(CHECK, keys("a", "b")),
    "wait": frame(WAIT, t(5) + keys("a", "b")) + frame(SET, b("a") + b("x"))
    + frame(SET, b("b") + b("y")),
    "add": frame(ADD, b("c") + struct.pack("<q", 5))
    + frame(ADD, b("c") + struct.pack("<q", -9)),
    "add_overflow": frame(SET, b("c") + b("9223372036854775807"))
    + frame(ADD, b("c") + struct.pack("<q", 1)),
    "add_not_int": frame(SET, b("c") + b("abc")) + frame(ADD, b("c") + struct.pack("<q", 1)),
    "cas": frame(CAS, b("k") + b("") + b("first")) + frame(CAS, b("k") + b("first") + b("2nd"))
    + frame(CAS, b("m") + b("x") + b("y")),
    "delete": frame(SET, b("k") + b("v")) + frame(DELETE, b("k")) + frame(DELETE, b("k")),
    "num_keys": frame(SET, b("k") + b("v")) + frame(NUM, b""),
    "append": frame(APPEND, b("l") + b("ab")) + frame(APPEND, b("l") + b("cd")),
    "multi_get": frame(MSET, struct.pack("<I", 2) + b("x") + b("1") + b("y") + b("2"))
    + frame(MGET, t(0) + keys("x", "y")),
    "multi_get_wait": frame(MGET, t(-1) + keys("p", "q")) + frame(SET, b("p") + b("1"))
    + frame(SET, b("q") + b("2")),
    "truncated": frame(SET, b("k") + b("value"))[:-3],
    "len_max": struct.pack("<IB", 0xFFFFFFFF, SET) + b"xxxx",
    "len_zero": struct.pack("<IB", 0, SET),
    "unknown_op": frame(200, b"abc"),
    "key_too_long": frame(SET, b("k" * 65) + b("v")),
    "empty_key": frame(SET, b("") + b("v")),
    "key_len_lies": frame(SET, struct.pack("<I", 1000) + b"abc"),
    "too_many_keys": frame(CHECK, struct.pack("<I", 0xFFFFFFFF) + b("a")),
    "trailing": frame(SET, b("k") + b("v") + b"junk"),
    "value_over_cap": frame(SET, b("k") + b("v" * 4097)),
}
os.makedirs(OUT, exist_ok=True)
for name, data in cases.items():
    with open(os.path.join(OUT, "req_" + name), "wb") as f:
        f.write(b"\x00" + data)
# Replies: mode 1, op, nkeys, status, body.
replies = {
    "get_ok": bytes([1, GET, 1, 0]) + struct.pack("<I", 1) + b("val"),
    "mget_ok": bytes([1, MGET, 2, 0]) + struct.pack("<I", 2) + b("a") + b("bb"),
    "timeout": bytes([1, WAIT, 3, 1]) + struct.pack("<III", 2, 0, 2),
    "timeout_bad_index": bytes([1, WAIT, 1, 1]) + struct.pack("<II", 1, 5),
    "error": bytes([1, SET, 1, 2]) + b"memory cap",
    "bool": bytes([1, CHECK, 2, 0, 1]),
    "num": bytes([1, ADD, 1, 0]) + struct.pack("<q", 42),
}
for name, data in replies.items():
    with open(os.path.join(OUT, "rep_" + name), "wb") as f:
        f.write(data)
hello = struct.pack("<IHHII", 0x53474E47, 1, 2, 1, 0) + struct.pack("<IIII", 8192, 1 << 26, 1 << 17, 1 << 27)
hello += bytes(range(32)) + bytes(range(32, 64))
with open(os.path.join(OUT, "hello_server"), "wb") as f:
    f.write(b"\x02" + hello)
with open(os.path.join(OUT, "hello_bad_magic"), "wb") as f:
    f.write(b"\x02" + b"GET / HTTP/1.1\r\n" + bytes(80))
