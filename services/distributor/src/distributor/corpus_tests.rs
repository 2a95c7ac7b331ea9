//! Replays the checked-in fuzz seed corpus (`fuzz/corpus/`) through the whole push path on stable Rust, so
//! CI exercises the inputs the nightly-only fuzz targets start from: no panic, and a status from the table.

use super::*;
use crate::distributor::tests::distributor;
use crate::testutil::*;
use http::StatusCode;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(start_paused = true)]
async fn fuzz_seeds_get_a_status_and_never_panic() {
    let fake = fake(Behavior::Accept);
    let (d, _registry) = distributor(Arc::new(single(fake)));
    let mut inputs: Vec<(String, Vec<u8>)> = corpus("snappy_decompress");
    inputs.extend(corpus("write_request").into_iter().map(|(n, raw)| (n, snappy(&raw))));
    assert!(inputs.len() >= 4, "the seed corpus is missing");
    for (name, body) in inputs {
        let status = match d.push(&tenant(), &body).await {
            Ok(o) => o.status(),
            Err(e) => e.status(),
        };
        assert!(
            [StatusCode::OK, StatusCode::BAD_REQUEST, StatusCode::PAYLOAD_TOO_LARGE].contains(&status),
            "{name}: {status}"
        );
    }
}
