//! The generator's lower KV tiers as `docqa serve` sets them up: host memory, then files under the data
//! directory's `kv/`, with the weights fingerprint that keeps one model's blocks from another's.

use std::path::Path;

use docqa_engine::kv::tiers::{TierSettings, TierStats, weights_fingerprint};
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};

use crate::adapter::AdapterInfo;
use crate::config::ServeConfig;

/// The tiers `config` asks for; the disk tier lives in `data_dir/kv`.
pub fn tier_settings(config: &ServeConfig, data_dir: &Path) -> TierSettings {
    TierSettings {
        host_bytes: config.kv_host_mib << 20,
        disk: (config.kv_disk_mib > 0).then(|| (data_dir.join("kv"), config.kv_disk_mib << 20)),
        high_water: config.kv_high_water,
        transit_bytes: config.kv_transit_mib << 20,
        write_through: config.kv_write_through,
    }
}

/// The fingerprint of the generator's weights and adapter, or 0 without a disk tier (blocks then
/// never outlive the process, and the weights need not be read for it).
pub fn fingerprint(
    config: &ServeConfig,
    generator: &Path,
    adapter: &AdapterInfo,
) -> anyhow::Result<u64> {
    if config.kv_disk_mib == 0 {
        return Ok(0);
    }
    Ok(weights_fingerprint(generator, adapter.sha256.as_deref())?)
}

/// The tiers' gauges on `/metrics` (counts since start are gauges, as the engine's other totals).
pub struct KvTierMetrics {
    blocks: IntGaugeVec,
    bytes: IntGaugeVec,
    hits: IntGaugeVec,
    evictions: IntGaugeVec,
    moved_bytes: IntGaugeVec,
    disk_errors: IntGauge,
}

impl KvTierMetrics {
    /// Creates the gauges in `registry`.
    pub fn register(registry: &Registry) -> Self {
        let vec = |name: &str, help: &str, label: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &[label]).expect("valid");
            registry
                .register(Box::new(g.clone()))
                .expect("metric names are unique and valid");
            g
        };
        let disk_errors = IntGauge::new(
            "docqa_kv_tier_disk_errors",
            "KV block files that failed to write (a full disk) or read back damaged since start",
        )
        .expect("valid");
        registry
            .register(Box::new(disk_errors.clone()))
            .expect("metric names are unique and valid");
        KvTierMetrics {
            blocks: vec(
                "docqa_kv_tier_blocks",
                "KV blocks held per lower tier",
                "tier",
            ),
            bytes: vec("docqa_kv_tier_bytes", "Bytes held per lower tier", "tier"),
            hits: vec(
                "docqa_kv_tier_hits",
                "KV blocks brought back to the device from each lower tier since start",
                "tier",
            ),
            evictions: vec(
                "docqa_kv_tier_evictions",
                "KV blocks pushed out of each lower tier by its size limit since start",
                "tier",
            ),
            moved_bytes: vec(
                "docqa_kv_tier_moved_bytes",
                "Bytes of KV moved since start: device to host (offload), host to disk, back to the device (reload)",
                "direction",
            ),
            disk_errors,
        }
    }

    /// Sets every gauge from `stats`.
    pub fn set(&self, stats: &TierStats) {
        let set =
            |g: &IntGaugeVec, label: &str, v: u64| g.with_label_values(&[label]).set(v as i64);
        set(&self.blocks, "host", stats.host_blocks);
        set(&self.blocks, "disk", stats.disk_blocks);
        set(&self.bytes, "host", stats.host_bytes);
        set(&self.bytes, "disk", stats.disk_bytes);
        set(&self.hits, "host", stats.host_hits);
        set(&self.hits, "disk", stats.disk_hits);
        set(&self.evictions, "host", stats.host_evictions);
        set(&self.evictions, "disk", stats.disk_evictions);
        set(&self.moved_bytes, "offload", stats.bytes_offloaded);
        set(&self.moved_bytes, "to_disk", stats.bytes_to_disk);
        set(&self.moved_bytes, "reload", stats.bytes_reloaded);
        self.disk_errors.set(stats.disk_errors as i64);
    }
}
