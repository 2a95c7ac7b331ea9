//! Generates the prost/tonic code for `proto/` with a vendored `protoc`, so a fresh machine needs no system
//! protobuf compiler.
//!
//! Messages come from prost. The `heddle.ingester.v1.Ingester` service is generated from a manual description
//! instead of the proto's `service` block, because `Push` must carry the encoded `prometheus.WriteRequest` as
//! raw bytes (`crate::codec::RawPushCodec`): the distributor forwards series slices of the body it received
//! and the ingester decodes them into its request arena, so neither side may decode and re-encode them with
//! prost. Keep the method list in step with `proto/heddle/ingester.proto`.

use tonic_prost_build::manual::{Builder, Method, Service};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=PROTOC");
    println!("cargo:rerun-if-changed=build.rs");
    // An explicit PROTOC wins; otherwise the vendored binary (passed to the builder, not via set_var).
    generate_messages(protoc_path()?)?;
    generate_ingester_service()?;
    generate_admin_service(protoc_path()?)
}

fn protoc_path() -> Result<Option<std::path::PathBuf>, Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_some() {
        Ok(None)
    } else {
        Ok(Some(protoc_bin_vendored::protoc_bin_path()?))
    }
}

/// `heddle.admin.v1`: plain prost messages and a generated tonic client and server (nothing is forwarded raw).
fn generate_admin_service(protoc: Option<std::path::PathBuf>) -> Result<(), Box<dyn std::error::Error>> {
    let root = manifest_dir().join("../../proto");
    let file = root.join("heddle/admin.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let mut config = tonic_prost_build::Config::new();
    if let Some(p) = protoc {
        config.protoc_executable(p);
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, &[file], &[root])?;
    Ok(())
}

fn generate_messages(protoc: Option<std::path::PathBuf>) -> Result<(), Box<dyn std::error::Error>> {
    let root = manifest_dir().join("../../proto");
    let files = [
        "prometheus/types.proto",
        "prometheus/remote.proto",
        "heddle/ingester.proto",
        "io/prometheus/write/v2/types.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let mut config = tonic_prost_build::Config::new();
    if let Some(p) = protoc {
        config.protoc_executable(p);
    }
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_with_config(config, &files.map(|f| root.join(f)), &[root])?;
    Ok(())
}

/// Writes `$OUT_DIR/heddle.ingester.v1.Ingester.rs` (modules `ingester_client` and `ingester_server`), after
/// checking that the proto declares exactly the methods described here.
fn generate_ingester_service() -> Result<(), Box<dyn std::error::Error>> {
    const PROST: &str = "tonic_prost::ProstCodec";
    let unary = |name: &str, route: &str, input: &str, output: &str, codec: &str| {
        Method::builder()
            .name(name)
            .route_name(route)
            .input_type(input)
            .output_type(output)
            .codec_path(codec)
            .build()
    };
    let service = Service::builder()
        .name("Ingester")
        .package("heddle.ingester.v1")
        .comment("The ingester's gRPC API: what distributors and queriers call. The tenant travels as the")
        .comment("`x-scope-orgid` request metadata entry, as in Mimir.")
        .method(unary(
            "push",
            "Push",
            "::bytes::Bytes",
            "crate::ingester::PushResponse",
            "crate::codec::RawPushCodec",
        ))
        .method(
            Method::builder()
                .name("query_stream")
                .route_name("QueryStream")
                .input_type("crate::ingester::QueryRequest")
                .output_type("crate::ingester::QueryStreamResponse")
                .codec_path(PROST)
                .server_streaming()
                .build(),
        )
        .method(unary(
            "label_names",
            "LabelNames",
            "crate::ingester::LabelNamesRequest",
            "crate::ingester::LabelNamesResponse",
            PROST,
        ))
        .method(unary(
            "label_values",
            "LabelValues",
            "crate::ingester::LabelValuesRequest",
            "crate::ingester::LabelValuesResponse",
            PROST,
        ))
        .method(unary(
            "series",
            "Series",
            "crate::ingester::SeriesRequest",
            "crate::ingester::SeriesResponse",
            PROST,
        ))
        .method(unary(
            "metrics_metadata",
            "MetricsMetadata",
            "crate::ingester::MetricsMetadataRequest",
            "crate::ingester::MetricsMetadataResponse",
            PROST,
        ))
        .method(unary(
            "query_exemplars",
            "QueryExemplars",
            "crate::ingester::ExemplarQueryRequest",
            "crate::ingester::ExemplarQueryResponse",
            PROST,
        ))
        .build();
    check_matches_proto(&[
        "Push",
        "QueryStream",
        "LabelNames",
        "LabelValues",
        "Series",
        "MetricsMetadata",
        "QueryExemplars",
    ])?;
    Builder::new().compile(&[service]);
    Ok(())
}

/// Fails the build when `service Ingester` in the proto and the manual description disagree on method names.
fn check_matches_proto(described: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let path = manifest_dir().join("../../proto/heddle/ingester.proto");
    let proto = std::fs::read_to_string(&path)?;
    let declared: Vec<&str> = proto
        .lines()
        .filter_map(|line| line.trim().strip_prefix("rpc "))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect();
    if declared != described {
        return Err(format!(
            "{} declares rpcs {declared:?} but build.rs describes {described:?}; update generate_ingester_service",
            path.display()
        )
        .into());
    }
    Ok(())
}

/// The crate's directory, read when the build script runs: a compile-time `env!` would bake in the path of
/// whichever checkout first compiled the script, and a shared target directory reuses that binary.
fn manifest_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()))
}
