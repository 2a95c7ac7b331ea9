//! The gRPC codec of `Ingester.Push`: the request travels as the encoded `prometheus.WriteRequest` bytes.
//!
//! On the wire `Push` is an ordinary protobuf call (any gRPC client sending a `WriteRequest` works), but on
//! both ends the request stays bytes: the distributor sends the body it assembled from raw series slices,
//! and the ingester decodes it into its request arena. Prost never decodes or re-encodes it.

use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::ingester::PushResponse;

/// A message [`RawPushCodec`] can carry: raw [`Bytes`] (the request) or a [`PushResponse`].
pub trait PushWire: Sized + Send + 'static {
    /// Appends the message's protobuf encoding to `dst`.
    fn encode_wire(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status>;
    /// Reads one whole message from `src`.
    fn decode_wire(src: &mut DecodeBuf<'_>) -> Result<Self, Status>;
}

impl PushWire for Bytes {
    fn encode_wire(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(self);
        Ok(())
    }

    fn decode_wire(src: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        // The frame buffer is split off, not copied.
        Ok(src.copy_to_bytes(src.remaining()))
    }
}

impl PushWire for PushResponse {
    fn encode_wire(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        self.encode(dst)
            .map_err(|e| Status::internal(format!("encoding PushResponse: {e}")))
    }

    fn decode_wire(src: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        PushResponse::decode(src).map_err(|e| Status::internal(format!("decoding PushResponse: {e}")))
    }
}

/// The codec of `Ingester.Push`, used by the generated client (`E` = [`Bytes`], `D` = [`PushResponse`]) and
/// server (the reverse).
#[derive(Debug)]
pub struct RawPushCodec<E, D>(PhantomData<fn() -> (E, D)>);

impl<E, D> Default for RawPushCodec<E, D> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<E: PushWire, D: PushWire> Codec for RawPushCodec<E, D> {
    type Encode = E;
    type Decode = D;
    type Encoder = PushEncoder<E>;
    type Decoder = PushDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        PushEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        PushDecoder(PhantomData)
    }
}

/// Encoder half of [`RawPushCodec`].
#[derive(Debug)]
pub struct PushEncoder<E>(PhantomData<fn() -> E>);

impl<E: PushWire> Encoder for PushEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_wire(dst)
    }
}

/// Decoder half of [`RawPushCodec`].
#[derive(Debug)]
pub struct PushDecoder<D>(PhantomData<fn() -> D>);

impl<D: PushWire> Decoder for PushDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode_wire(src).map(Some)
    }
}
