//! Admin routes (HTTP and gRPC) and plain HTTP: nothing is done without the token, whichever way it is reached.

use super::case::*;
use heddle_model::METRIC_NAME;
use heddle_proto::admin::{ForgetMemberRequest, ListTenantsRequest, ShutdownRequest};
use heddle_proto::ingester::LabelValuesRequest;
use heddle_proto::ingester::ingester_client::IngesterClient as IngesterGrpc;

pub(crate) fn cases(_now: i64) -> Vec<Case> {
    use reqwest::Method;
    vec![
        // Admin routes need the token whichever way they are reached.
        Case::post("shutdown without the token", "/ingester/shutdown", Vec::new())
            .admin()
            .want(401, &["token"]),
        Case::post("shutdown with a wrong token", "/ingester/shutdown", Vec::new())
            .admin()
            .token("not-the-token")
            .want(401, &["token"]),
        Case::post("flush without the token", "/ingester/flush", Vec::new())
            .admin()
            .want(401, &["token"]),
        Case::post(
            "prepare-shutdown without the token",
            "/ingester/prepare-shutdown",
            Vec::new(),
        )
        .admin()
        .want(401, &["token"]),
        Case::post("flush with the token answers", "/ingester/flush?wait=true", Vec::new())
            .admin()
            .token(TOKEN)
            .want(204, &[]),
        // Plain HTTP.
        Case::new("GET on the push endpoint", Method::GET, "/api/v1/push").want(405, &[]),
        Case::get("a path that does not exist", "/api/v1/../../etc/passwd").want(404, &[]),
    ]
}

pub(crate) fn grpc_cases() -> Vec<GrpcCase> {
    vec![
        GrpcCase {
            name: "ingester LabelValues on the single process",
            code: tonic::Code::Unimplemented,
            contains: "",
            call: |addr| {
                Box::pin(async move {
                    let mut c = IngesterGrpc::connect(format!("http://{addr}")).await.expect("connect");
                    let req = LabelValuesRequest {
                        name: METRIC_NAME.into(),
                        start_timestamp_ms: 0,
                        end_timestamp_ms: i64::MAX,
                        matchers: vec![],
                    };
                    c.label_values(request(req, Some(WITNESS), None))
                        .await
                        .map(|r| format!("{:?}", r.into_inner().values))
                })
            },
        },
        GrpcCase {
            name: "admin ListTenants without the token",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let r = admin(addr)
                        .await
                        .list_tenants(request(ListTenantsRequest {}, None, None))
                        .await;
                    r.map(|r| format!("{:?}", r.into_inner().tenants))
                })
            },
        },
        GrpcCase {
            name: "admin Shutdown with a wrong token",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let req = request(ShutdownRequest {}, None, Some("Bearer guess"));
                    admin(addr).await.shutdown(req).await.map(|r| r.into_inner().message)
                })
            },
        },
        GrpcCase {
            name: "admin ForgetMember with the token in Basic form",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let req = request(
                        ForgetMemberRequest { id: "x".into() },
                        None,
                        Some(&format!("Basic {TOKEN}")),
                    );
                    admin(addr).await.forget_member(req).await.map(|r| format!("{r:?}"))
                })
            },
        },
    ]
}
