//! Test-only helpers shared by unit tests, integration tests and the load generator.
//!
//! Owns: the process harness that builds and runs the `heddle` binary ([`HeddleProcess`], [`ManagedProcess`],
//! [`cargo_bin`], [`free_port`], [`wait_until`]); deterministic node-exporter-like data ([`SeriesGen`]); the wire
//! codecs of remote write and remote read ([`codec`]) and an OTLP sender ([`otlp`]); HTTP clients for both ([`push`],
//! [`ReadClient`]); a process's own `/metrics` ([`metrics_text`], [`metric_value`]); an independent XOR chunk
//! reader/writer ([`xor`]) so chunks served by heddle are checked without trusting heddle's own encoder, and one of
//! native histogram chunks ([`histogram`]); small bodies that cost a server much more than their size ([`hostile`]); an in-memory stand-in server ([`MockReceiver`]); throwaway certificates for
//! TLS tests ([`TestPki`]); and proptest strategies ([`strategies`]).
//!
//! It does not know heddle's internals: everything here talks to the public contracts (flags, HTTP paths, wire
//! formats) of DESIGN.md §3.

pub mod alloc;
mod cargo;
pub mod client;
pub mod cluster;
pub mod codec;
mod command;
mod endpoints;
mod error;
mod generate;
mod heddle;
pub mod histogram;
pub mod hostile;
mod http;
mod metrics;
mod mock;
pub mod otlp;
mod port;
mod process;
pub mod promtool;
pub mod s3;
pub mod strategies;
pub mod tls;
mod tools;
mod wait;
pub mod xor;

pub use cargo::{WORKSPACE_BINS, cargo_bin, workspace_root};
pub use client::{
    PushOutcome, ReadClient, ReadMode, RemoteWriteProtocol, SeriesSamples, eq, http_client, http_client_unpooled,
    matcher, now_ms, push, push_body, push_body_as, query, timeseries,
};
pub use cluster::{Cluster, ClusterOptions, Node, Role};
pub use command::{CommandOutput, run_bounded, run_loadtest};
pub use endpoints::Endpoints;
pub use error::TestkitError;
pub use generate::{MAX_JITTER_MS, MIN_INTERVAL_FOR_JITTER_MS, SeriesGen, splitmix64};
pub use heddle::{HeddleOptions, HeddleProcess};
pub use http::http_get;
pub use metrics::{metric_value, metrics_text};
pub use mock::MockReceiver;
pub use port::free_port;
pub use process::{DEFAULT_STOP_TIMEOUT, ManagedProcess};
pub use tls::TestPki;
pub use tools::{copy_dir, prometheus_tool};
pub use wait::{POLL_INTERVAL, wait_until, wait_until_async};
