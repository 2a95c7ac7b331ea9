//! What a query answers: Prometheus' four result types. A vector's element or a matrix's point holds a float
//! or a native histogram, as Prometheus' `Sample {F, H}` and `Series {Floats, Histograms}`.

use heddle_model::{FloatHistogram, Labels, Sample};

/// One native histogram sample: Prometheus' `HPoint`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// Milliseconds.
    pub t: i64,
    pub h: FloatHistogram,
}

impl HistogramPoint {
    pub fn new(t: i64, h: FloatHistogram) -> Self {
        Self { t, h }
    }
}

/// One series' value at the evaluation time of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub struct InstantSample {
    pub labels: Labels,
    /// Milliseconds.
    pub t: i64,
    /// The float value; 0 when the value is a histogram.
    pub v: f64,
    /// The value when it is a native histogram (Prometheus' API writes `"histogram"` instead of `"value"`).
    pub h: Option<Box<FloatHistogram>>,
}

/// One series' samples over time: a range query's result, or a range vector at the top of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    /// Float points, sorted by time (Prometheus' API: `"values"`).
    pub samples: Vec<Sample>,
    /// Histogram points, sorted by time, at other times than the float points (Prometheus' API:
    /// `"histograms"`, written only when not empty).
    pub histograms: Vec<HistogramPoint>,
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
