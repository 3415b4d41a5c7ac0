//! Prometheus metrics: HTTP requests and latencies, ingestion jobs, answers per route, and the
//! engine's KV cache gauges, its lower tiers' among them. Rendered in the text exposition format at `GET /metrics`.

use docqa_engine::serving::EngineStats;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::db::jobs::JobCounts;
use crate::kv_tiers::KvTierMetrics;

/// Every metric docqa exports.
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    http_latency: HistogramVec,
    answers: IntCounterVec,
    answer_latency: HistogramVec,
    jobs: IntGaugeVec,
    kv_blocks_total: IntGauge,
    kv_blocks_used: IntGauge,
    engine_running: IntGauge,
    engine_waiting: IntGauge,
    prefix_hit_rate: Gauge,
    prefix_hit_tokens: IntGauge,
    computed_tokens: IntGauge,
    graph_replays: IntGauge,
    prefill_rate: Gauge,
    decode_step_seconds: Gauge,
    kv_tiers: KvTierMetrics,
}

fn registered<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    r.register(Box::new(c.clone()))
        .expect("metric names are unique and valid");
    c
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let r = Registry::new();
        let latency_buckets = vec![
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
        ];
        let http_requests = registered(
            &r,
            IntCounterVec::new(
                Opts::new("docqa_http_requests_total", "HTTP requests answered"),
                &["method", "route", "status"],
            )
            .expect("valid"),
        );
        let http_latency = registered(
            &r,
            HistogramVec::new(
                HistogramOpts::new(
                    "docqa_http_request_duration_seconds",
                    "HTTP request latency",
                )
                .buckets(latency_buckets.clone()),
                &["method", "route"],
            )
            .expect("valid"),
        );
        let answers = registered(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "docqa_answers_total",
                    "Questions answered, by route and outcome",
                ),
                &["route", "outcome"],
            )
            .expect("valid"),
        );
        let answer_latency = registered(
            &r,
            HistogramVec::new(
                HistogramOpts::new("docqa_answer_duration_seconds", "Time to a complete answer")
                    .buckets(latency_buckets),
                &["route"],
            )
            .expect("valid"),
        );
        let jobs = registered(
            &r,
            IntGaugeVec::new(
                Opts::new("docqa_ingestion_jobs", "Ingestion jobs by state"),
                &["status"],
            )
            .expect("valid"),
        );
        let gauge =
            |name: &str, help: &str| registered(&r, IntGauge::new(name, help).expect("valid"));
        let kv_blocks_total = gauge(
            "docqa_engine_kv_blocks_total",
            "KV cache blocks in the pool",
        );
        let kv_blocks_used = gauge(
            "docqa_engine_kv_blocks_used",
            "KV cache blocks held by requests",
        );
        let engine_running = gauge("docqa_engine_running_requests", "Generations running");
        let engine_waiting = gauge("docqa_engine_waiting_requests", "Generations waiting");
        let prefix_hit_tokens = gauge(
            "docqa_engine_prefix_cache_hit_tokens",
            "Prompt tokens found in the KV prefix cache since start",
        );
        let computed_tokens = gauge(
            "docqa_engine_computed_tokens",
            "Tokens run through the model since start",
        );
        let graph_replays = gauge(
            "docqa_engine_graph_replays",
            "Decode steps replayed from recorded CUDA graphs since start",
        );
        let prefix_hit_rate = registered(
            &r,
            Gauge::new(
                "docqa_engine_prefix_cache_hit_rate",
                "Share of looked-up prompt tokens found in the KV prefix cache",
            )
            .expect("valid"),
        );
        let float_gauge =
            |name: &str, help: &str| registered(&r, Gauge::new(name, help).expect("valid"));
        let prefill_rate = float_gauge(
            "docqa_engine_prefill_tokens_per_second",
            "Prompt tokens read per second over the prefill steps since start (0 until measured)",
        );
        let decode_step_seconds = float_gauge(
            "docqa_engine_decode_step_seconds",
            "Mean seconds of a decode-only step since start (0 until measured)",
        );
        let kv_tiers = KvTierMetrics::register(&r);
        Metrics {
            registry: r,
            http_requests,
            http_latency,
            answers,
            answer_latency,
            jobs,
            kv_blocks_total,
            kv_blocks_used,
            engine_running,
            engine_waiting,
            prefix_hit_rate,
            prefix_hit_tokens,
            computed_tokens,
            graph_replays,
            prefill_rate,
            decode_step_seconds,
            kv_tiers,
        }
    }

    /// Counts one HTTP request.
    pub fn observe_http(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.http_requests
            .with_label_values(&[method, route, &status.to_string()])
            .inc();
        self.http_latency
            .with_label_values(&[method, route])
            .observe(seconds);
    }

    /// Counts one answer.
    pub fn observe_answer(&self, route: &str, ok: bool, seconds: f64) {
        let outcome = if ok { "ok" } else { "error" };
        self.answers.with_label_values(&[route, outcome]).inc();
        if ok {
            self.answer_latency
                .with_label_values(&[route])
                .observe(seconds);
        }
    }

    /// The text exposition of every metric, after refreshing the gauges.
    pub fn render(&self, engine: &EngineStats, jobs: &JobCounts) -> String {
        self.kv_blocks_total.set(engine.total_blocks as i64);
        self.kv_blocks_used.set(engine.used_blocks as i64);
        self.engine_running.set(engine.running as i64);
        self.engine_waiting.set(engine.waiting as i64);
        self.prefix_hit_rate.set(engine.prefix_hit_rate());
        self.prefix_hit_tokens.set(engine.prefix_hit_tokens as i64);
        self.computed_tokens.set(engine.computed_tokens as i64);
        self.graph_replays.set(engine.graph_replays as i64);
        self.prefill_rate
            .set(engine.prefill_tokens_per_second().unwrap_or(0.0));
        self.decode_step_seconds
            .set(engine.seconds_per_decode_step().unwrap_or(0.0));
        self.kv_tiers.set(&engine.tiers);
        for (status, n) in [
            ("queued", jobs.queued),
            ("running", jobs.running),
            ("succeeded", jobs.succeeded),
            ("failed", jobs.failed),
            ("cancelled", jobs.cancelled),
        ] {
            self.jobs.with_label_values(&[status]).set(n);
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
