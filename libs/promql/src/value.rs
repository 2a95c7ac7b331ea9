//! What a query answers: Prometheus' four result types.

use heddle_model::{Labels, Sample};

/// One series' value at the evaluation time of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub struct InstantSample {
    pub labels: Labels,
    /// Milliseconds.
    pub t: i64,
    pub v: f64,
}

/// One series' samples over time: a range query's result, or a range vector at the top of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    /// Sorted by time.
    pub samples: Vec<Sample>,
}

/// The result of a query, as Prometheus' API types it (`resultType`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar {
        t: i64,
        v: f64,
    },
    String {
        t: i64,
        s: String,
    },
    /// In evaluation order: `sort`, `topk`... at the top of a query decide it.
    Vector(Vec<InstantSample>),
    /// Sorted by labels.
    Matrix(Vec<RangeSeries>),
}

impl Value {
    /// Prometheus' `resultType`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar { .. } => "scalar",
            Value::String { .. } => "string",
            Value::Vector(_) => "vector",
            Value::Matrix(_) => "matrix",
        }
    }
}
