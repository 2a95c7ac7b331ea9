#!/usr/bin/env python3
"""Writes the seed corpus (fuzz/corpus/<target>/seed-*) from hand-built valid inputs of each format.

Run from anywhere: python3 fuzz/make_seeds.py. Formats: Prometheus remote write/read protobuf, snappy block
(literal-only, which every decoder must accept), Prometheus WAL records and pages (CRC32C), XOR chunks; native
histogram chunks are the ones Prometheus itself wrote to the `chunks_head` files of the tsdb test fixtures."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def chunks_head_chunks(path):
    """The chunk data of a Prometheus `chunks_head` file (after its 8-byte header, until the zero padding)."""
    with open(path, "rb") as f:
        b = f.read()
    out, at = [], 8
    while at + 25 < len(b) and any(b[at:at + 25]):
        p, length, shift = at + 25, 0, 0
        while True:
            x = b[p]
            p += 1
            length |= (x & 0x7F) << shift
            shift += 7
            if x < 0x80:
                break
        out.append(b[p:p + length])
        at = p + length + 4
    return out


def uvarint(x):
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def varint(x):
    return uvarint((x << 1) ^ (x >> 63) if x < 0 else x << 1)


def field(num, wire, payload):
    key = uvarint((num << 3) | wire)
    if wire == 2:
        return key + uvarint(len(payload)) + payload
    return key + payload


def pb_str(num, s):
    return field(num, 2, s.encode() if isinstance(s, str) else s)


def pb_int(num, v):
    return field(num, 0, uvarint(v & 0xFFFFFFFFFFFFFFFF))


def pb_double(num, v):
    return field(num, 1, struct.pack("<d", v))


def label(name, value):
    return pb_str(1, name) + pb_str(2, value)


def timeseries(labels, samples, histograms=()):
    out = b"".join(field(1, 2, label(n, v)) for n, v in labels)
    out += b"".join(field(2, 2, pb_double(1, v) + pb_int(2, t)) for t, v in samples)
    out += b"".join(field(4, 2, h) for h in histograms)
    return out


def write_request(series):
    return b"".join(field(1, 2, timeseries(*s)) for s in series)


def span(offset, length):
    return field(1, 0, varint(offset)) + pb_int(2, length)


def int_histogram(t, schema, positive, negative, zero):
    """A `Histogram` (the same message in remote write 1.0 and 2.0) with integer counts: `positive` and
    `negative` are (spans, deltas), spans as (offset, length)."""
    count = zero
    for _, deltas in (positive, negative):
        c = 0
        for d in deltas:
            c += d
            count += c
    out = pb_int(1, count) + pb_double(3, count * 1.5) + field(4, 0, varint(schema))
    out += pb_double(5, 1e-128) + pb_int(6, zero)
    for (spans, deltas), (span_field, delta_field) in ((negative, (8, 9)), (positive, (11, 12))):
        out += b"".join(field(span_field, 2, span(o, n)) for o, n in spans)
        if deltas:
            out += field(delta_field, 2, b"".join(varint(d) for d in deltas))
    return out + pb_int(14, 2) + pb_int(15, t)


def custom_float_histogram(t, counts, bounds):
    """A float-count histogram with custom bucket bounds (schema -53, packed doubles)."""
    out = pb_double(2, sum(counts)) + pb_double(3, 4.25) + field(4, 0, varint(-53))
    out += field(11, 2, span(0, len(counts))) + field(13, 2, b"".join(struct.pack("<d", c) for c in counts))
    return out + pb_int(14, 3) + pb_int(15, t) + field(16, 2, b"".join(struct.pack("<d", b) for b in bounds))


def write_request_v2(series):
    """A remote write 2.0 Request: symbols (field 4, "" first), then series (field 5) of packed label
    references, samples, and the encoded native histograms `histograms`."""
    symbols = [""]

    def ref(s):
        if s not in symbols:
            symbols.append(s)
        return symbols.index(s)

    out = b""
    for labels, samples, histograms in series:
        refs = b"".join(uvarint(ref(n)) + uvarint(ref(v)) for n, v in labels)
        ts = field(1, 2, refs)
        ts += b"".join(field(2, 2, pb_double(1, v) + pb_int(2, t)) for t, v in samples)
        ts += b"".join(field(3, 2, h) for h in histograms)
        out += field(5, 2, ts)
    return b"".join(pb_str(4, s) for s in symbols) + out


def snappy_literal(data):
    out = bytearray(uvarint(len(data)))
    pos = 0
    while pos < len(data):
        chunk = data[pos : pos + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + struct.pack("<H", n)
        out += chunk
        pos += len(chunk)
    return bytes(out)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def wal_series_record(series):
    out = bytearray([1])
    for ref, labels in series:
        out += struct.pack(">Q", ref) + uvarint(len(labels))
        for n, v in labels:
            out += uvarint(len(n)) + n.encode() + uvarint(len(v)) + v.encode()
    return bytes(out)


def wal_samples_record(samples):
    (ref0, t0, _) = samples[0]
    out = bytearray([2]) + struct.pack(">Qq", ref0, t0)
    for ref, t, v in samples:
        out += varint(ref - ref0) + varint(t - t0) + struct.pack(">d", v)
    return bytes(out)


def wal_page(records):
    out = bytearray()
    for rec in records:
        out += bytes([1]) + struct.pack(">HI", len(rec), crc32c(rec)) + rec
    return bytes(out)


def xor_one_sample(t, v):
    return struct.pack(">H", 1) + varint(t) + struct.pack(">d", v)


def read_request():
    matchers = [field(3, 2, pb_int(1, 0) + pb_str(2, "__name__") + pb_str(3, "up")),
                field(3, 2, pb_int(1, 2) + pb_str(2, "job") + pb_str(3, "a.+|b"))]
    query = pb_int(1, 1_700_000_000_000) + pb_int(2, 1_700_000_060_000) + b"".join(matchers)
    return field(1, 2, query) + pb_int(2, 1)


def main():
    up = [("__name__", "up"), ("instance", "a:9090"), ("job", "node")]
    wr = write_request([(up, [(1_700_000_000_000, 1.0), (1_700_000_015_000, 0.0)]),
                        ([("__name__", "x"), ("le", "+Inf")], [(-5, float("nan"))])])
    histograms = [
        int_histogram(1_700_000_000_000, 3, ([(-2, 3), (4, 1)], [1, 2, -1, 5]), ([(0, 1)], [2]), 1),
        int_histogram(1_700_000_015_000, -4, ([], []), ([], []), 0),
        custom_float_histogram(1_700_000_030_000, [1.0, 0.5, 2.0], [0.1, 1.0]),
    ]
    latency = [("__name__", "latency_seconds"), ("job", "api")]
    series = wal_series_record([(1, up), (2, [("__name__", "x")])])
    samples = wal_samples_record([(1, 1_700_000_000_000, 1.0), (2, 1_700_000_000_001, 2.5)])
    seeds = {
        "write_request": [wr, write_request([]), write_request([(up, [])]),
                          write_request([(latency, [], histograms), (up, [(1_700_000_000_000, 1.0)], histograms[:1])])],
        "write_request_v2": [
            write_request_v2([(up, [(1_700_000_000_000, 1.0), (1_700_000_015_000, 0.0)], []),
                              ([("__name__", "x"), ("le", "+Inf")], [(-5, float("nan"))], [])]),
            write_request_v2([]),
            write_request_v2([(up, [], [b"", b""])]),
            write_request_v2([(latency, [], histograms)]),
        ],
        "snappy_decompress": [snappy_literal(wr), snappy_literal(b""), snappy_literal(wr * 8)],
        "wal_record": [series, samples, bytes([3]) + struct.pack(">Q", 1) + varint(0) + varint(10)],
        "wal_segment": [wal_page([series, samples])],
        "xor_chunk": [xor_one_sample(1_700_000_000_000, 1.0), struct.pack(">H", 0)],
        "remote_read": [snappy_literal(read_request())],
        "histogram_chunk": [c for name in ("chunks_head-000001", "chunks_head-float-000001")
                            for c in chunks_head_chunks(os.path.join(
                                HERE, "..", "libs", "tsdb", "tests", "fixtures", "prometheus-histograms", name))],
    }
    for target, inputs in seeds.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for i, data in enumerate(inputs):
            with open(os.path.join(d, f"seed-{i}"), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
