//! Generates the prost/tonic code for `proto/` with a vendored `protoc`, so a fresh machine needs no system
//! protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=PROTOC");
    // An explicit PROTOC wins; otherwise the vendored binary (passed to the builder, not via set_var).
    if std::env::var_os("PROTOC").is_some() {
        generate(None)
    } else {
        generate(Some(protoc_bin_vendored::protoc_bin_path()?))
    }
}

fn generate(protoc: Option<std::path::PathBuf>) -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        "prometheus/types.proto",
        "prometheus/remote.proto",
        "heddle/ingester.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let mut config = tonic_prost_build::Config::new();
    if let Some(p) = protoc {
        config.protoc_executable(p);
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, &files.map(|f| root.join(f)), &[root])?;
    Ok(())
}
