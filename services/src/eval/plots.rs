//! The report's plots, each as SVG and PNG (plotters): accuracy against mean latency (one point per route
//! per dataset), the distribution of total latency per route, and accuracy against document length. Text
//! needs a TrueType font: `DOCQA_PLOT_FONT` names one, else a common system sans-serif is used; without
//! any, the plots are skipped and the report says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::RouteSummary;
use super::results::QuestionResult;

const SIZE: (u32, u32) = (960, 640);
/// The font family every plot draws text in (registered by [`ensure_font`]).
pub(crate) const FONT: &str = "sans-serif";

const SYSTEM_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers the plots' font once; the error says what to install when there is none.
pub(crate) fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let candidates = std::env::var("DOCQA_PLOT_FONT")
                .ok()
                .into_iter()
                .chain(SYSTEM_FONTS.iter().map(|s| s.to_string()));
            for path in candidates {
                if let Ok(bytes) = std::fs::read(&path) {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                        return Ok(());
                    }
                }
            }
            Err("plots need a TrueType font: install one (e.g. the fonts-dejavu-core package) or set \
                 DOCQA_PLOT_FONT to a .ttf file"
                .to_string())
        })
        .clone()
}

fn route_color(route: &str) -> RGBColor {
    match route {
        "rag" => RGBColor(35, 87, 198),
        "long" => RGBColor(142, 68, 173),
        "auto" => RGBColor(26, 127, 55),
        _ => RGBColor(90, 90, 90),
    }
}

type Drawn = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Writes every plot as `NAME.svg` and `NAME.png` into `dir`; returns the files written.
pub fn render(
    summaries: &[RouteSummary],
    results: &[QuestionResult],
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    ensure_font()?;
    let plots = [
        ("accuracy_vs_latency", Canvas::AccuracyVsLatency(summaries)),
        ("latency_distribution", Canvas::LatencyDistribution(results)),
        ("accuracy_vs_length", Canvas::AccuracyVsLength(results)),
    ];
    let mut written = Vec::new();
    for (name, canvas) in plots {
        let svg = dir.join(format!("{name}.svg"));
        let png = dir.join(format!("{name}.png"));
        canvas.draw_to(&svg, &png)?;
        written.extend([svg, png]);
    }
    Ok(written)
}

/// One plot and its data.
enum Canvas<'a> {
    AccuracyVsLatency(&'a [RouteSummary]),
    LatencyDistribution(&'a [QuestionResult]),
    AccuracyVsLength(&'a [QuestionResult]),
}

impl Canvas<'_> {
    fn draw_to(&self, svg: &Path, png: &Path) -> Drawn {
        self.draw(SVGBackend::new(svg, SIZE).into_drawing_area())?;
        self.draw(BitMapBackend::new(png, SIZE).into_drawing_area())
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Drawn {
        root.fill(&WHITE).map_err(err)?;
        match self {
            Canvas::AccuracyVsLatency(s) => accuracy_vs_latency(&root, s)?,
            Canvas::LatencyDistribution(r) => latency_distribution(&root, r)?,
            Canvas::AccuracyVsLength(r) => accuracy_vs_length(&root, r)?,
        }
        root.present().map_err(err)
    }
}

fn routes_of<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut routes: Vec<String> = names.map(str::to_string).collect();
    routes.sort_by_key(|r| {
        (
            ["rag", "long", "auto"].iter().position(|k| k == r),
            r.clone(),
        )
    });
    routes.dedup();
    routes
}

/// A log-scale range covering `values` (seconds or tokens), padded a little.
fn log_range(values: impl Iterator<Item = f64>, floor: f64) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return floor..floor * 10.0;
    }
    (lo.max(floor) / 1.5)..(hi.max(floor) * 1.5)
}

/// The y range of scores: 0 to a little above the best, in tens, at least 0–10 %.
fn score_range(scores: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let best = scores.fold(0.0f64, f64::max);
    0.0..((best / 10.0).floor() * 10.0 + 10.0).clamp(10.0, 100.0)
}

/// Dataset names without their split suffix, for labels.
fn short_name(dataset: &str) -> &str {
    ["_dev", "_test", "_val", "_validation"]
        .iter()
        .find_map(|s| dataset.strip_suffix(s))
        .unwrap_or(dataset)
}

fn number_label(v: &f64) -> String {
    if *v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn accuracy_vs_latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    summaries: &[RouteSummary],
) -> Drawn {
    let answered: Vec<&RouteSummary> = summaries.iter().filter(|s| s.questions > 0).collect();
    let point = |s: &RouteSummary| (s.total_ms[0] / 1000.0, s.score * 100.0);
    let x = log_range(answered.iter().map(|s| point(s).0), 0.01);
    // Room on the right for the dataset name written beside the slowest point.
    let x = x.start..x.end * 3.0;
    let y = score_range(answered.iter().map(|s| point(s).1));
    let label_gap = (y.end - y.start) / 40.0;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Accuracy against latency: one point per route and dataset",
            (FONT, 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(x.log_scale(), y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("mean total time per question (s, log scale)")
        .y_desc("score (%)")
        .x_label_formatter(&number_label)
        .label_style((FONT, 15))
        .draw()
        .map_err(err)?;
    // Each dataset's routes joined by a thin line, named once at its slowest point.
    let mut datasets: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for s in &answered {
        datasets
            .entry(s.dataset.as_str())
            .or_default()
            .push(point(s));
    }
    for (name, mut points) in datasets {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let last = *points.last().expect("a dataset has a point");
        chart
            .draw_series(LineSeries::new(
                points,
                RGBColor(170, 170, 170).stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                short_name(name).to_string(),
                (last.0, last.1 + label_gap),
                (FONT, 14),
            )))
            .map_err(err)?;
    }
    for route in routes_of(answered.iter().map(|s| s.route.as_str())) {
        let points: Vec<(f64, f64)> = answered
            .iter()
            .filter(|s| s.route == route)
            .map(|s| point(s))
            .collect();
        draw_markers(&mut chart, &route, &points, 7, true)?;
    }
    legend(&mut chart)
}

/// Draws a route's markers: circles for rag, triangles for long, squares for auto (distinct in grey
/// print); with `legend`, the series is named after the route.
fn draw_markers<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    route: &str,
    points: &[(f64, f64)],
    size: i32,
    legend: bool,
) -> Drawn
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = route_color(route);
    let label = if legend {
        route.to_string()
    } else {
        String::new()
    };
    let half = size - 1;
    let at = points.iter().copied();
    match route {
        "long" => {
            let series = chart
                .draw_series(at.map(|p| TriangleMarker::new(p, size + 1, color.filled())))
                .map_err(err)?;
            if legend {
                series
                    .label(label)
                    .legend(move |p| TriangleMarker::new(p, size, color.filled()));
            }
        }
        "auto" => {
            let series = chart
                .draw_series(at.map(|p| {
                    EmptyElement::at(p)
                        + Rectangle::new([(-half, -half), (half, half)], color.filled())
                }))
                .map_err(err)?;
            if legend {
                series.label(label).legend(move |p| {
                    EmptyElement::at(p)
                        + Rectangle::new([(-half, -half), (half, half)], color.filled())
                });
            }
        }
        _ => {
            let series = chart
                .draw_series(at.map(|p| Circle::new(p, size, color.filled())))
                .map_err(err)?;
            if legend {
                series
                    .label(label)
                    .legend(move |p| Circle::new(p, size, color.filled()));
            }
        }
    }
    Ok(())
}

/// Draws a chart's series labels in the upper left.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Drawn {
    chart
        .configure_series_labels()
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)
}

fn latency_distribution<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    results: &[QuestionResult],
) -> Drawn {
    let ok: Vec<&QuestionResult> = results.iter().filter(|r| r.error.is_none()).collect();
    let x = log_range(ok.iter().map(|r| r.total_ms as f64 / 1000.0), 0.01);
    let mut chart = ChartBuilder::on(root)
        .caption("Latency distribution per route (all datasets)", (FONT, 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(x.log_scale(), 0f64..100f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("total time of a question (s, log scale)")
        .x_label_formatter(&number_label)
        .y_desc("questions answered within that time (%)")
        .label_style((FONT, 15))
        .draw()
        .map_err(err)?;
    for route in routes_of(ok.iter().map(|r| r.route_requested.as_str())) {
        let mut times: Vec<f64> = ok
            .iter()
            .filter(|r| r.route_requested == route)
            .map(|r| r.total_ms as f64 / 1000.0)
            .collect();
        times.sort_by(f64::total_cmp);
        let n = times.len() as f64;
        let color = route_color(&route);
        let steps = times
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, 100.0 * (i + 1) as f64 / n));
        let label = format!("{route} (p50 {:.1} s)", times[times.len() / 2]);
        chart
            .draw_series(LineSeries::new(steps, color.stroke_width(3)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
    }
    legend(&mut chart)
}

/// Mean score per route in document-length bins (powers of two of tokens): (route, [(tokens, score %)]).
fn by_length(results: &[QuestionResult]) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut bins: BTreeMap<(String, u32), (f64, f64, usize)> = BTreeMap::new();
    for r in results
        .iter()
        .filter(|r| r.error.is_none() && r.document_tokens > 0)
    {
        let bin = (r.document_tokens as f64).log2().floor() as u32;
        let e = bins.entry((r.route_requested.clone(), bin)).or_default();
        e.0 += r.document_tokens as f64;
        e.1 += r.score;
        e.2 += 1;
    }
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for ((route, _), (tokens, score, n)) in bins {
        out.entry(route)
            .or_default()
            .push((tokens / n as f64, 100.0 * score / n as f64));
    }
    out
}

fn accuracy_vs_length<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    results: &[QuestionResult],
) -> Drawn {
    let lines = by_length(results);
    let x = log_range(lines.values().flatten().map(|p| p.0), 100.0);
    let y = score_range(lines.values().flatten().map(|p| p.1));
    let mut chart = ChartBuilder::on(root)
        .caption("Accuracy against document length", (FONT, 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(x.log_scale(), y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("document length (tokens, log scale; mean of each doubling)")
        .x_label_formatter(&number_label)
        .y_desc("mean score (%)")
        .label_style((FONT, 15))
        .draw()
        .map_err(err)?;
    // Later routes are drawn thinner on top, so a route that matches another stays visible around it.
    let routes = routes_of(lines.keys().map(String::as_str));
    for (i, route) in routes.iter().enumerate() {
        let color = route_color(route);
        let width = 2 * (routes.len() - i) as u32;
        let points = lines[route].clone();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(err)?
            .label(route.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        draw_markers(&mut chart, route, &points, 3 + width as i32, false)?;
    }
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report::summarize;

    fn result(q: &str, route: &str, score: f64, total_ms: u64, tokens: u64) -> QuestionResult {
        QuestionResult {
            dataset: if tokens > 4000 {
                "long-docs"
            } else {
                "short-docs"
            }
            .into(),
            route: route.into(),
            document_tokens: tokens,
            total_ms,
            ..crate::eval::results::example(q, route, score)
        }
    }

    #[test]
    fn scores_are_averaged_per_doubling_of_document_length() {
        let rs = vec![
            result("a", "rag", 1.0, 100, 1100),
            result("b", "rag", 0.0, 100, 1900),
            result("c", "rag", 0.5, 100, 5000),
            result("d", "long", 1.0, 900, 5000),
        ];
        let lines = by_length(&rs);
        assert_eq!(lines["rag"], vec![(1500.0, 50.0), (5000.0, 50.0)]);
        assert_eq!(lines["long"], vec![(5000.0, 100.0)]);
    }

    #[test]
    fn every_plot_is_written_as_svg_and_png() {
        if ensure_font().is_err() {
            eprintln!("not run: no TrueType font on this machine");
            return;
        }
        let rs: Vec<QuestionResult> = (0..20)
            .flat_map(|i| {
                let tokens = 500 * (i + 1);
                [
                    result(
                        &format!("q{i}"),
                        "rag",
                        (i % 3) as f64 / 2.0,
                        800 + 40 * i,
                        tokens,
                    ),
                    result(
                        &format!("q{i}"),
                        "long",
                        (i % 2) as f64,
                        4000 + 900 * i,
                        tokens,
                    ),
                    result(&format!("q{i}"), "auto", 0.5, 900 + 50 * i, tokens),
                ]
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let files = render(&summarize(&rs), &rs, dir.path()).unwrap();
        assert_eq!(files.len(), 6);
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            if f.extension().unwrap() == "png" {
                assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
            } else {
                let svg = String::from_utf8(bytes).unwrap();
                assert!(
                    svg.starts_with("<svg") && svg.contains("<text"),
                    "{}",
                    f.display()
                );
            }
        }
        let svg = std::fs::read_to_string(dir.path().join("accuracy_vs_latency.svg")).unwrap();
        for label in ["rag", "long", "auto", "short-docs", "long-docs"] {
            assert!(svg.contains(label), "the plot names {label}");
        }
    }
}
