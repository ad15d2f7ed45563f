#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_fabric_frame (see fuzz/fuzz_fabric_frame.c):
scripts of a peer's frames of each kind (data matched, early, large and
padded, deferred in the socket, abort, goodbye, malformed, cut short) with
receives posted before and after them, matching and not, sends, withdrawn
receives, and hellos. Run from the repository root."""
import os
import struct

OUT = "fuzz/corpus/fuzz_fabric_frame"
DATA, ABORT, BYE = 0x474E4701, 0x474E4702, 0x474E4703
HELLO_MAGIC, HELLO_VERSION = 0x31504354474E4147, 3
TOKEN = b"gang fuzz token\0"
PAD_MIN, PAGE, HDR = 64 * 1024, 4096, 32
TIMEOUT, MISMATCH = 5, 8
# Lengths a RECV or SEND picks by index (fuzz_fabric_frame.c: lens).
LENS = [0, 1, 7, 32, 100, 2047, 2048, 4096, 8192, 32767, 32768, 65535,
        65536, 65537, 100000, 300001]
OWNS, PACED = 16, 16


def opts(early=0, piece=0, close=False):
    """The first byte of a stream script: EARLY_MAX and piece by index."""
    return bytes([(early << 1) | (piece << 3) | (32 if close else 0)])


def write(b):
    out = b""
    while b:  # WRITE takes at most 65535 bytes
        out += bytes([0]) + struct.pack("<H", len(b[:65535])) + b[:65535]
        b = b[65535:]
    return out


def fill(n, v):
    assert n % 8 == 0
    out = b""
    while n:
        k = min(n, 65535 * 8)
        out += bytes([1]) + struct.pack("<HB", k // 8, v)
        n -= k
    return out


def recv(tag, ctx, seq, length, owns=False):
    return bytes([2, tag, ctx, seq, LENS.index(length) | (OWNS if owns else 0)])


def send(tag, length, paced=False):
    return bytes([3, tag, LENS.index(length) | (PACED if paced else 0)])


PULL, SHUT, DRAIN = bytes([4]), bytes([6]), bytes([7])


def cancel(i):
    return bytes([5, i])


def header(kind, tag, ctx, seq, length):
    return struct.pack("<IIQQQ", kind, tag, ctx, seq, length)


def frame(tag, ctx, seq, payload):
    """A DATA frame as a peer writes it: padded to a page from 64 KiB."""
    h = header(DATA, tag, ctx, seq, len(payload))
    if len(payload) >= PAD_MIN:
        h += bytes(PAGE - HDR)
    return h + payload


def big(tag, ctx, seq, length, v=0, cut=None):
    """A DATA frame whose pad and payload are written by FILL (a pattern
    from v), so the input stays small; cut: only its first bytes."""
    head = header(DATA, tag, ctx, seq, length)
    if cut is not None and cut < HDR:
        return write(head[:cut])
    out = write(head)
    if length >= PAD_MIN:
        out += fill(PAGE - HDR, 0)
    body = length if cut is None else cut - HDR
    out += fill(body - body % 8, v)
    if body % 8:
        out += write(bytes([v]) * (body % 8))
    return out


def pat(n, seed=1):
    return bytes((i * 131 + seed * 17) % 251 for i in range(n))


def bye():
    return header(BYE, 0, 0, 0, 0)


def abort(status, text):
    return header(ABORT, status, 0, 0, len(text)) + text


streams = {
    # Data frames and their receives.
    "data_posted": recv(1, 2, 3, 7) + write(frame(1, 2, 3, pat(7))) + PULL,
    "data_early": write(frame(1, 2, 3, pat(7))) + PULL + recv(1, 2, 3, 7),
    "data_empty": recv(4, 0, 0, 0) + write(frame(4, 0, 0, b"")) + PULL
    + write(frame(5, 0, 0, b"")) + PULL + recv(5, 0, 0, 0),
    "data_wrong_len": recv(1, 2, 3, 7) + write(frame(1, 2, 3, pat(8))) + PULL,
    "data_wrong_len_early": write(frame(1, 2, 3, pat(8))) + PULL
    + recv(1, 2, 3, 7),
    "data_other_key": recv(1, 2, 3, 32) + write(frame(1, 2, 4, pat(32)))
    + PULL + recv(1, 2, 4, 32),
    "data_fifo": write(frame(9, 1, 1, pat(100, 1)) + frame(9, 1, 1, pat(100, 2)))
    + PULL + recv(9, 1, 1, 100) + recv(9, 1, 1, 100),
    "data_reverse": write(b"".join(frame(t, 1, 1, pat(32, t)) for t in range(5)))
    + PULL + b"".join(recv(t, 1, 1, 32) for t in reversed(range(5))),
    "data_split_header": recv(1, 1, 1, 100) + write(frame(1, 1, 1, pat(100))[:10])
    + PULL + write(frame(1, 1, 1, pat(100))[10:50]) + PULL
    + write(frame(1, 1, 1, pat(100))[50:]) + PULL,
    # Mid-size and large frames: straight into the receive, padded heads,
    # early ones buffered up to EAGER_MAX and left in the socket above it.
    "data_32k": recv(2, 1, 1, 32768) + big(2, 1, 1, 32768, 2) + PULL,
    "padded_posted": recv(3, 1, 1, 65536, owns=True) + big(3, 1, 1, 65536, 0x33)
    + PULL,
    "padded_early": big(3, 1, 1, 65536, 0x33) + PULL + recv(3, 1, 1, 65536),
    "deferred": big(3, 1, 1, 65537, 0x44) + PULL + recv(3, 1, 1, 65537) + PULL,
    "deferred_then_small": big(3, 1, 1, 100000, 0x44) + write(frame(4, 1, 1, pat(7)))
    + PULL + recv(4, 1, 1, 7) + PULL + recv(3, 1, 1, 100000) + PULL,
    "deferred_hup": big(3, 1, 1, 65537, 0x44) + PULL + SHUT + PULL
    + recv(3, 1, 1, 65537),
    "large_posted": recv(6, 1, 1, 300001, owns=True) + big(6, 1, 1, 300001, 0x66)
    + PULL,
    # Receives bet on (read_posted): won, lost, and never placed on a
    # buffer the receive does not own.
    "bet_won": recv(7, 1, 1, 4096, owns=True) + big(7, 1, 1, 4096, 7) + PULL,
    "bet_lost": recv(7, 1, 1, 4096, owns=True) + big(8, 1, 1, 2048, 8) + PULL
    + big(7, 1, 1, 4096, 7) + PULL + recv(8, 1, 1, 2048),
    "bet_not_owned": recv(7, 1, 1, 4096) + big(8, 1, 1, 2048, 8) + PULL
    + recv(8, 1, 1, 2048),
    "bet_padded_lost": recv(7, 1, 1, 65536, owns=True) + big(8, 1, 1, 8192, 8)
    + PULL + big(7, 1, 1, 65536, 0x77) + PULL + recv(8, 1, 1, 8192),
    # Abort frames: a reason, a status passed on, a hostile length, cut
    # short.
    "abort_reason": write(abort(TIMEOUT, b"rank 1: deadline exceeded")) + PULL,
    "abort_mismatch": recv(1, 1, 1, 7) + write(abort(MISMATCH, b"sizes")) + PULL,
    "abort_unknown_status": write(abort(9999, b"?")) + PULL,
    "abort_long": write(header(ABORT, 7, 0, 0, 1 << 40) + b"x" * 64) + PULL,
    "abort_cut": write(abort(7, b"half a reason")[:-5]) + SHUT + PULL,
    # Goodbyes: an orderly end, a send after it, data after it, a bad one.
    "bye_eof": write(bye()) + SHUT + PULL,
    "bye_then_send": write(bye()) + PULL + send(1, 7),
    "bye_pending_recv": recv(1, 1, 1, 7) + write(bye()) + SHUT + PULL,
    "bye_then_data": write(bye() + frame(1, 1, 1, pat(7))) + SHUT + PULL
    + recv(1, 1, 1, 7),
    "bye_with_len": write(header(BYE, 0, 0, 0, 5) + b"hello") + PULL,
    # Malformed and cut-short frames.
    "bad_kind": write(header(0x12345678, 1, 1, 1, 0)) + PULL,
    "len_2_41": write(header(DATA, 1, 1, 1, 1 << 41)) + PULL,
    "len_max_frame": write(header(DATA, 1, 1, 1, 1 << 40)) + PULL + SHUT + PULL,
    "junk": write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(8)) + PULL,
    "eof_in_header": write(frame(1, 1, 1, pat(7))[:20]) + SHUT + PULL,
    "eof_in_payload": recv(1, 1, 1, 100) + write(frame(1, 1, 1, pat(100))[:60])
    + SHUT + PULL,
    # GANG_TCP_EARLY_MAX: a peer running ahead is held back while nothing
    # is posted, and fails the fabric when a receive needs what is behind.
    "early_held": big(1, 1, 1, 65535 - 65535 % 8, 1) + big(2, 1, 1, 32768, 2)
    + PULL + recv(3, 1, 1, 7) + PULL,
    "early_deferred_past_cap": big(1, 1, 1, 65536, 1) + big(2, 1, 1, 65537, 2) + PULL
    + recv(2, 1, 1, 65537) + PULL,
    "early_reuse": big(1, 1, 1, 8192, 1) + big(2, 1, 1, 4096, 2)
    + PULL + recv(1, 1, 1, 8192) + big(3, 1, 1, 4096, 3) + PULL
    + recv(3, 1, 1, 4096) + recv(2, 1, 1, 4096),
    # Sends: queued, paced by a receive, drained by the peer, cut off.
    "send_small": send(1, 7) + PULL + DRAIN,
    "send_paced": recv(2, 1, 1, 8192) + send(2, 8192, paced=True) + PULL
    + big(2, 1, 1, 8192, 2) + PULL + DRAIN + PULL,
    "send_large_peer_closed": send(1, 300001) + PULL,
    # Withdrawn receives: before their frame, while it arrives, early.
    "cancel_posted": recv(1, 1, 1, 7) + cancel(0) + write(frame(1, 1, 1, pat(7)))
    + PULL + recv(1, 1, 1, 7),
    "cancel_partial": recv(1, 1, 1, 32768) + big(1, 1, 1, 32768, 1, cut=1000)
    + PULL + cancel(0) + PULL,
    "cancel_waiting": big(1, 1, 1, 8192, 1, cut=504) + PULL
    + recv(1, 1, 1, 8192) + cancel(0) + fill(8192 - 472, 1)
    + PULL + recv(1, 1, 1, 8192),
}
special = {  # name: first byte
    "early_held": opts(early=0),
    "early_deferred_past_cap": opts(early=0),
    "send_paced": opts(piece=1),
    "send_large_peer_closed": opts(close=True),
}
os.makedirs(OUT, exist_ok=True)
for name, script in streams.items():
    with open(os.path.join(OUT, "stream_" + name), "wb") as f:
        f.write(special.get(name, opts(early=3)) + script)


def hello(magic=HELLO_MAGIC, version=HELLO_VERSION, rank=1, size=2,
          token=TOKEN):
    return struct.pack("<QIIII", magic, version, rank, size, 0) + token


def hello_case(rank, size, want, mask, h):
    """Mode 1: the fabric's rank and size, the rank connected to (-1: any
    higher one, as accepted), the peers connected already, the hello."""
    return bytes([1, rank, size - 1, want + 1, mask]) + h


hellos = {
    "accept": hello_case(0, 2, -1, 0, hello()),
    "connect": hello_case(2, 4, 1, 0, hello(rank=1, size=4)),
    "bad_magic": hello_case(0, 2, -1, 0, hello(magic=0x4745542F)),
    "old_version": hello_case(0, 2, -1, 0, hello(version=2)),
    "other_world": hello_case(0, 2, -1, 0, hello(token=b"another world!!\0")),
    "size_mismatch": hello_case(0, 2, -1, 0, hello(size=3)),
    "rank_too_big": hello_case(0, 2, -1, 0, hello(rank=2)),
    "rank_negative": hello_case(0, 2, -1, 0, hello(rank=0x80000000)),
    "rank_lower": hello_case(1, 3, -1, 0, hello(rank=0, size=3)),
    "rank_twice": hello_case(0, 3, -1, 0b010, hello(rank=1, size=3)),
    "wrong_rank": hello_case(2, 4, 1, 0, hello(rank=0, size=4)),
    "reserved_set": hello_case(0, 2, -1, 0,
                               struct.pack("<QIIII", HELLO_MAGIC, HELLO_VERSION,
                                           1, 2, 0xFFFFFFFF) + TOKEN),
}
for name, data in hellos.items():
    with open(os.path.join(OUT, "hello_" + name), "wb") as f:
        f.write(data)
