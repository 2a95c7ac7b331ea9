//! [`GrpcIngesterClient`]: [`IngesterClient`] over gRPC.

use super::auth::{AUTHORIZATION_METADATA, BearerToken};
use super::tls::{ClientTls, grpc_endpoint};
use super::{DEFAULT_MAX_MESSAGE_BYTES, TENANT_METADATA};
use crate::client::{IngesterClient, QueryStream};
use crate::ingester::ingester_client::IngesterClient as GeneratedClient;
use crate::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesRequest, SeriesResponse,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use heddle_model::TenantId;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::{Request, Status};

/// Calls a remote ingester's `heddle.ingester.v1.Ingester` service. Cheap to clone; clones share the
/// channel (and its HTTP/2 connection).
///
/// Every call carries the tenant as `x-scope-orgid` metadata and a deadline: `timeout` for unary calls,
/// `query_timeout` for the whole of a `QueryStream` (defaults to `timeout`). The deadline is sent to the server
/// (`grpc-timeout`) and enforced here too, failing with `DeadlineExceeded`.
#[derive(Debug, Clone)]
pub struct GrpcIngesterClient {
    inner: GeneratedClient<Channel>,
    timeout: Duration,
    query_timeout: Duration,
    /// `authorization` value sent with every call, when the ingesters require a cluster token.
    credentials: Option<MetadataValue<Ascii>>,
}

impl GrpcIngesterClient {
    /// Wraps an existing channel; messages up to [`DEFAULT_MAX_MESSAGE_BYTES`] are accepted both ways.
    pub fn new(channel: Channel, timeout: Duration) -> Self {
        let inner = GeneratedClient::new(channel)
            .max_decoding_message_size(DEFAULT_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(DEFAULT_MAX_MESSAGE_BYTES);
        Self {
            inner,
            timeout,
            query_timeout: timeout,
            credentials: None,
        }
    }

    /// A client for `addr` (`host:port`, or a full `http://` URI) that connects on first use and reconnects
    /// as needed. Fails only when `addr` is not a valid URI.
    pub fn connect_lazy(addr: &str, timeout: Duration) -> Result<Self, tonic::transport::Error> {
        Self::connect_lazy_with_tls(addr, timeout, None)
    }

    /// [`Self::connect_lazy`], over TLS when `tls` is given: a bare `host:port` is then dialed as `https://`,
    /// and the server's certificate must chain to the CA of `tls` (and name the host, or `tls`'s server name).
    pub fn connect_lazy_with_tls(
        addr: &str,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> Result<Self, tonic::transport::Error> {
        let channel = grpc_endpoint(addr, tls)?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Self::new(channel, timeout))
    }

    /// Sets the deadline for a whole `QueryStream` call, from request to last message.
    pub fn with_query_timeout(mut self, query_timeout: Duration) -> Self {
        self.query_timeout = query_timeout;
        self
    }

    /// Sends `token` as `authorization: Bearer <token>` with every call (nothing when no token is set), for
    /// ingesters that require the cluster token.
    pub fn with_credentials(mut self, token: &BearerToken) -> Self {
        self.credentials = token.metadata_value();
        self
    }

    fn request<T>(&self, tenant: &TenantId, message: T, timeout: Duration) -> Result<Request<T>, Status> {
        let value = MetadataValue::try_from(tenant.as_str()).map_err(|_| {
            Status::invalid_argument(format!(
                "tenant id {tenant:?} cannot be sent as {TENANT_METADATA} metadata"
            ))
        })?;
        let mut request = Request::new(message);
        request.metadata_mut().insert(TENANT_METADATA, value);
        if let Some(credentials) = &self.credentials {
            request
                .metadata_mut()
                .insert(AUTHORIZATION_METADATA, credentials.clone());
        }
        super::trace::inject(request.metadata_mut());
        request.set_timeout(timeout);
        Ok(request)
    }

    /// Runs `call`, failing with `DeadlineExceeded` if it has not answered by `deadline`.
    async fn within<T>(
        &self,
        method: &str,
        deadline: Instant,
        timeout: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout_at(deadline, call).await {
            Ok(response) => response
                .map(tonic::Response::into_inner)
                .map_err(|e| map_timeout(e, method, deadline, timeout)),
            Err(_) => Err(deadline_exceeded(method, timeout)),
        }
    }
}

fn deadline_exceeded(method: &str, timeout: Duration) -> Status {
    Status::deadline_exceeded(format!("ingester {method} did not complete within {timeout:?}"))
}

/// tonic enforces the `grpc-timeout` it sends (and the server enforces it too), but reports expiry as
/// `Cancelled: Timeout expired`; callers must see `DeadlineExceeded`, which they may retry elsewhere.
fn map_timeout(status: Status, method: &str, deadline: Instant, timeout: Duration) -> Status {
    if status.code() == tonic::Code::Cancelled && Instant::now() >= deadline {
        deadline_exceeded(method, timeout)
    } else {
        status
    }
}

/// Ends `stream` with a `DeadlineExceeded` error if it is still running at `deadline`.
fn with_deadline<S>(stream: S, deadline: Instant, timeout: Duration) -> impl Stream<Item = S::Item> + Send
where
    S: Stream<Item = Result<QueryStreamResponse, Status>> + Send + Unpin,
{
    let sleep = Box::pin(tokio::time::sleep_until(deadline));
    futures::stream::unfold(Some((stream, sleep)), move |state| async move {
        let (mut stream, mut sleep) = state?;
        tokio::select! {
            biased;
            item = stream.next() => item.map(|item| {
                let item = item.map_err(|e| map_timeout(e, "QueryStream", deadline, timeout));
                (item, Some((stream, sleep)))
            }),
            () = &mut sleep => Some((Err(deadline_exceeded("QueryStream", timeout)), None)),
        }
    })
    // A reader may poll once more after the end (the querier's merge does, for an ingester that had nothing);
    // an ended `unfold` must not be polled again.
    .fuse()
}

#[async_trait::async_trait]
impl IngesterClient for GrpcIngesterClient {
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, Status> {
        let deadline = Instant::now() + self.timeout;
        let request = self.request(tenant, write_request, self.timeout)?;
        let mut client = self.inner.clone();
        self.within("Push", deadline, self.timeout, client.push(request)).await
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, Status> {
        let deadline = Instant::now() + self.query_timeout;
        let request = self.request(tenant, req, self.query_timeout)?;
        let mut client = self.inner.clone();
        let stream = self
            .within(
                "QueryStream",
                deadline,
                self.query_timeout,
                client.query_stream(request),
            )
            .await?;
        Ok(with_deadline(stream, deadline, self.query_timeout).boxed())
    }

    async fn label_names(&self, tenant: &TenantId, req: LabelNamesRequest) -> Result<LabelNamesResponse, Status> {
        let deadline = Instant::now() + self.timeout;
        let request = self.request(tenant, req, self.timeout)?;
        let mut client = self.inner.clone();
        self.within("LabelNames", deadline, self.timeout, client.label_names(request))
            .await
    }

    async fn label_values(&self, tenant: &TenantId, req: LabelValuesRequest) -> Result<LabelValuesResponse, Status> {
        let deadline = Instant::now() + self.timeout;
        let request = self.request(tenant, req, self.timeout)?;
        let mut client = self.inner.clone();
        self.within("LabelValues", deadline, self.timeout, client.label_values(request))
            .await
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, Status> {
        let deadline = Instant::now() + self.timeout;
        let request = self.request(tenant, req, self.timeout)?;
        let mut client = self.inner.clone();
        self.within("Series", deadline, self.timeout, client.series(request))
            .await
    }

    async fn metrics_metadata(
        &self,
        tenant: &TenantId,
        req: MetricsMetadataRequest,
    ) -> Result<MetricsMetadataResponse, Status> {
        let deadline = Instant::now() + self.timeout;
        let request = self.request(tenant, req, self.timeout)?;
        let mut client = self.inner.clone();
        self.within(
            "MetricsMetadata",
            deadline,
            self.timeout,
            client.metrics_metadata(request),
        )
        .await
    }

    async fn query_exemplars(
        &self,
        tenant: &TenantId,
        req: ExemplarQueryRequest,
    ) -> Result<ExemplarQueryResponse, Status> {
        let deadline = Instant::now() + self.query_timeout;
        let request = self.request(tenant, req, self.query_timeout)?;
        let mut client = self.inner.clone();
        self.within(
            "QueryExemplars",
            deadline,
            self.query_timeout,
            client.query_exemplars(request),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_ended_query_stream_stays_ended() {
        let empty = futures::stream::empty::<Result<QueryStreamResponse, Status>>();
        let timeout = Duration::from_secs(5);
        let mut stream = Box::pin(with_deadline(empty, Instant::now() + timeout, timeout));
        assert!(stream.next().await.is_none());
        assert!(stream.next().await.is_none(), "polled again after its end");
    }
}
