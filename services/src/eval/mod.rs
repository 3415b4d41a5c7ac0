//! Batch evaluation of answer quality against latency, per route: datasets ([`dataset`]), metrics
//! ([`metrics`]), the HTTP client ([`client`]), the run with resume ([`runner`], [`results`]) and the
//! reports ([`report`], [`plots`], and [`compare`] for two runs side by side).

pub mod client;
pub mod compare;
pub mod dataset;
pub mod metrics;
pub mod plots;
pub mod report;
pub mod results;
pub mod routes_compared;
pub mod runner;
