//! `docqa perplexity-plot`: draws the per-segment perplexity curves of several `docqa perplexity --json`
//! reports on one chart (log scale), as SVG and PNG, so dense, RoPE-scaled and sink-window reads of one
//! text can be compared at a glance.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use plotters::prelude::*;
use serde_json::Value;

use crate::eval::plots::{FONT, ensure_font, legend};

/// `docqa perplexity-plot`.
#[derive(Debug, Args)]
pub struct PerplexityPlotArgs {
    /// Reports written by `docqa perplexity --json`.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// Output path without extension: `OUT.svg` and `OUT.png` are written.
    #[arg(long)]
    out: PathBuf,
    /// Chart title.
    #[arg(long, default_value = "Perplexity per 1,000 tokens")]
    title: String,
}

/// One curve: its label and (tokens read, perplexity) points.
struct Curve {
    label: String,
    points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(35, 87, 198),
    RGBColor(214, 39, 40),
    RGBColor(26, 127, 55),
    RGBColor(142, 68, 173),
    RGBColor(230, 126, 34),
    RGBColor(90, 90, 90),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];

/// Runs `docqa perplexity-plot`.
pub fn run(args: PerplexityPlotArgs) -> anyhow::Result<()> {
    ensure_font().map_err(|e| anyhow!(e))?;
    let curves = args
        .reports
        .iter()
        .map(|p| read_curve(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let svg = args.out.with_extension("svg");
    let png = args.out.with_extension("png");
    draw(
        SVGBackend::new(&svg, (960, 600)).into_drawing_area(),
        &curves,
        &args.title,
    )?;
    draw(
        BitMapBackend::new(&png, (960, 600)).into_drawing_area(),
        &curves,
        &args.title,
    )?;
    println!("{}\n{}", svg.display(), png.display());
    Ok(())
}

fn read_curve(path: &Path) -> anyhow::Result<Curve> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let r: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let points = r["segments"]
        .as_array()
        .ok_or_else(|| anyhow!("{} has no segments", path.display()))?
        .iter()
        .filter_map(|s| Some((s["end"].as_f64()?, s["perplexity"].as_f64()?)))
        .collect();
    Ok(Curve {
        label: label(&r),
        points,
    })
}

/// "sinks 4 + window 1020", "dense, yarn ×4"...
fn label(r: &Value) -> String {
    let window = r["window"].as_u64().unwrap_or(0);
    if window > 0 {
        return format!(
            "sinks {} + window {window}",
            r["sinks"].as_u64().unwrap_or(0)
        );
    }
    match r["rope"].as_str().unwrap_or("plain") {
        "plain" => "dense, plain RoPE".to_string(),
        rope => format!(
            "dense, {rope} RoPE ×{}",
            r["rope_factor"].as_f64().unwrap_or(1.0)
        ),
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    curves: &[Curve],
    title: &str,
) -> anyhow::Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plotting: {e}");
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let points = curves.iter().flat_map(|c| &c.points);
    let max_x = points.clone().map(|p| p.0).fold(1.0, f64::max);
    let max_y = points.clone().map(|p| p.1).fold(10.0, f64::max).min(1e5);
    let min_y = points.map(|p| p.1).fold(f64::INFINITY, f64::min).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, (min_y * 0.8..max_y * 1.25).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("tokens read")
        .y_desc("perplexity of the last 1,000 tokens (log scale)")
        .x_label_formatter(&|v| format!("{}K", (v / 1000.0).round()))
        .label_style((FONT, 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(c.points.clone(), color.stroke_width(3)))
            .map_err(|x| e(&x))?
            .label(c.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
    }
    legend(&mut chart).map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
