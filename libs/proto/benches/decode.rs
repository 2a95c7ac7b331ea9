//! Criterion-free micro benchmark of the remote-write decoder: `cargo bench -p heddle-proto --bench decode`.
//!
//! Decodes a realistic request (2,000 node-exporter-like series of 7 labels and one sample each, encoded by
//! prost, so canonical) and a non-canonical one (the same series, each label carrying an unknown field), and
//! prints, for the measure pass, the fill pass and the whole decode, the input rate in MB/s (decompressed
//! bytes) and the cost per sample. The same series as a remote write 2.0 request (labels as references into
//! a symbol table) get the same three rows. Prints rates; asserts nothing about speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bumpalo::Bump;
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_proto::write_v2;
use heddle_proto::{
    decode_measured, decode_measured_v2, decode_write_request, decode_write_request_v2, measure_write_request,
    measure_write_request_v2,
};
use prost::Message;
use std::collections::HashMap;

const SERIES: usize = 2_000;
/// Each figure is the fastest of [`WINDOWS`] windows of [`WINDOW`] (after one warm-up window): on a shared
/// machine the fastest window is the one least disturbed by other work, so it is the most repeatable.
const WINDOW: Duration = Duration::from_millis(150);
const WINDOWS: usize = 12;

fn node_exporter_request() -> WriteRequest {
    const MODES: [&str; 8] = ["idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"];
    let timeseries = (0..SERIES)
        .map(|i| {
            let labels = [
                ("__name__", "node_cpu_seconds_total".to_string()),
                ("cpu", (i % 64).to_string()),
                ("mode", MODES[i % MODES.len()].to_string()),
                (
                    "instance",
                    format!("node-{:04}.eu-west-1.compute.internal:9100", i / 512),
                ),
                ("job", "node-exporter".to_string()),
                ("cluster", "prod-eu-west-1".to_string()),
                ("namespace", "monitoring".to_string()),
            ];
            TimeSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| Label {
                        name: name.to_string(),
                        value,
                    })
                    .collect(),
                samples: vec![Sample {
                    value: 1234.5 + i as f64 * 0.25,
                    timestamp: 1_764_612_000_000 + i as i64,
                }],
                ..Default::default()
            }
        })
        .collect();
    WriteRequest {
        timeseries,
        metadata: vec![],
    }
}

/// The request with an unknown varint field (number 3) appended to every label: valid protobuf every decoder
/// must accept, but not what prost writes.
fn with_unknown_label_fields(req: &WriteRequest) -> Vec<u8> {
    fn frame(field: u8, payload: &[u8], out: &mut Vec<u8>) {
        out.push(field << 3 | 2);
        let mut len = payload.len();
        while len >= 0x80 {
            out.push(len as u8 | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(payload);
    }
    let mut body = Vec::new();
    for ts in &req.timeseries {
        let mut series = Vec::new();
        for l in &ts.labels {
            let mut label = l.encode_to_vec();
            label.extend([0x18, 0x01]);
            frame(1, &label, &mut series);
        }
        for s in &ts.samples {
            frame(2, &s.encode_to_vec(), &mut series);
        }
        frame(1, &series, &mut body);
    }
    body
}

/// `req` as a remote write 2.0 request: strings interned in first-use order after `""`, as senders do.
fn v2_request(req: &WriteRequest) -> write_v2::Request {
    let mut symbols = vec![String::new()];
    let mut index = HashMap::from([(String::new(), 0u32)]);
    let mut intern = |s: &str| {
        *index.entry(s.to_owned()).or_insert_with(|| {
            symbols.push(s.to_owned());
            (symbols.len() - 1) as u32
        })
    };
    let timeseries = req
        .timeseries
        .iter()
        .map(|ts| write_v2::TimeSeries {
            labels_refs: ts
                .labels
                .iter()
                .flat_map(|l| [intern(&l.name), intern(&l.value)])
                .collect(),
            samples: ts
                .samples
                .iter()
                .map(|s| write_v2::Sample {
                    value: s.value,
                    timestamp: s.timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    write_v2::Request { symbols, timeseries }
}

fn bench_v2(row: &str, body: &[u8]) {
    let samples = {
        let arena = Bump::new();
        let req = decode_write_request_v2(&arena, body).expect("the request decodes");
        req.timeseries.iter().map(|t| t.samples.len()).sum::<usize>()
    };
    let measure = time(|| {
        black_box(measure_write_request_v2(black_box(body)).expect("measure"));
    });
    report(row, "measure", body.len(), samples, measure);

    let mut arena = Bump::new();
    let measured = measure_write_request_v2(body).expect("measure");
    let fill = time(|| {
        arena.reset();
        black_box(decode_measured_v2(&arena, black_box(measured)).expect("fill"));
    });
    report(row, "fill", body.len(), samples, fill);

    let mut arena = Bump::new();
    let whole = time(|| {
        arena.reset();
        black_box(decode_write_request_v2(&arena, black_box(body)).expect("decode"));
    });
    report(row, "decode", body.len(), samples, whole);
}

/// The fastest mean time per run of `f` over [`WINDOWS`] windows.
fn time(mut f: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    for window in 0..=WINDOWS {
        let started = Instant::now();
        let mut runs = 0u32;
        while started.elapsed() < WINDOW {
            f();
            runs += 1;
        }
        if window > 0 {
            best = best.min(started.elapsed() / runs);
        }
    }
    best
}

fn report(row: &str, step: &str, bytes: usize, samples: usize, per_run: Duration) {
    let secs = per_run.as_secs_f64();
    println!(
        "{row:<12} {step:<8} {:>8.0} MB/s {:>8.1} ns/sample {:>9.1} us/request",
        bytes as f64 / secs / 1e6,
        secs * 1e9 / samples as f64,
        secs * 1e6
    );
}

fn bench(row: &str, body: &[u8]) {
    let samples = {
        let arena = Bump::new();
        let req = decode_write_request(&arena, body).expect("the request decodes");
        req.timeseries.iter().map(|t| t.samples.len()).sum::<usize>()
    };
    let measure = time(|| {
        black_box(measure_write_request(black_box(body)).expect("measure"));
    });
    report(row, "measure", body.len(), samples, measure);

    let mut arena = Bump::new();
    let measured = measure_write_request(body).expect("measure");
    let fill = time(|| {
        arena.reset();
        black_box(decode_measured(&arena, black_box(measured)).expect("fill"));
    });
    report(row, "fill", body.len(), samples, fill);

    let mut arena = Bump::new();
    let whole = time(|| {
        arena.reset();
        black_box(decode_write_request(&arena, black_box(body)).expect("decode"));
    });
    report(row, "decode", body.len(), samples, whole);
}

fn main() {
    let req = node_exporter_request();
    let canonical = req.encode_to_vec();
    let unknown = with_unknown_label_fields(&req);
    println!(
        "{SERIES} series, 7 labels and 1 sample each: canonical {} bytes ({} per sample), with unknown label fields {} bytes",
        canonical.len(),
        canonical.len() / SERIES,
        unknown.len()
    );
    let v2 = v2_request(&req).encode_to_vec();
    println!("the same as remote write 2.0: {} bytes", v2.len());
    bench("canonical", &canonical);
    bench_v2("2.0", &v2);
    bench("non-canon", &unknown);
}
