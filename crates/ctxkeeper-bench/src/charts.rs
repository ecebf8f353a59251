//! The charts of bench/RESULTS.md, drawn as SVG with plotters.
//!
//! Each chart is a pure function from results to SVG text, so it can be checked without a
//! file system; [`write_all`] writes every chart whose data exists.
//!
//! ```
//! use ctxkeeper_bench::charts::step_overhead;
//! use ctxkeeper_bench::markdown::OverheadRow;
//! use ctxkeeper_bench::results::StepFigures;
//!
//! let rows = vec![OverheadRow {
//!     system: "ctxkeeper `default`".into(),
//!     setup: String::new(),
//!     figures: StepFigures { quiet_p50_us: 1.5, quiet_p99_us: 20.0, ..Default::default() },
//! }];
//! let svg = step_overhead(&rows, 16_000).unwrap();
//! assert!(svg.contains("ctxkeeper default"));
//! ```

use std::path::Path;

use anyhow::{Context as _, Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::markdown::{OverheadRow, micros, thousands};
use crate::results::{Results, Stores, TokenCounting};
use crate::series::Series;

const FONT: &str = "sans-serif";
/// Colour-blind-safe categorical colours (Okabe–Ito, its yellow darkened to read on white).
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(153, 153, 51),
    RGBColor(120, 120, 120),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing a chart: {e}")
}

/// Writes every chart whose results exist into `dir`; returns the file names written.
pub fn write_all(results: &Results, dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut charts = Vec::new();
    let rows = crate::markdown::overhead_rows(results);
    if !rows.is_empty() {
        let window = results.engine.as_ref().map(|e| e.window).unwrap_or(16_000);
        charts.push(("step_overhead.svg", step_overhead(&rows, window)?));
    }
    if let Some(series) = &results.series {
        charts.push(("input_tokens_per_step.svg", input_tokens_per_step(series)?));
    }
    if let Some(tokens) = &results.tokens {
        charts.push(("token_counting.svg", token_counting(tokens)?));
    }
    if let Some(stores) = &results.stores {
        charts.push(("stores.svg", stores_latency(stores)?));
    }
    let mut written = Vec::new();
    for (name, svg) in charts {
        let path = dir.join(name);
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(name.to_string());
    }
    Ok(written)
}

/// Horizontal bars on a log axis: quiet-step p50 (bar) and p99 (tick) of every system.
pub fn step_overhead(rows: &[OverheadRow], window: u64) -> Result<String> {
    let mut svg = String::new();
    {
        let height = 140 + 48 * rows.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (1100, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let max = rows
            .iter()
            .map(|r| r.figures.quiet_p99_us.max(r.figures.quiet_p50_us))
            .fold(1.0, f64::max);
        let min = rows
            .iter()
            .map(|r| r.figures.quiet_p50_us)
            .fold(f64::MAX, f64::min)
            .max(0.01);
        // One decade of room on the right for the figures printed after each bar.
        let x_range =
            (10f64.powf(min.log10().floor())..10f64.powf(max.log10().ceil() + 1.0)).log_scale();
        let n = rows.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Context-management time per model call, steps that do not compact (window {})",
                    thousands(window)
                ),
                (FONT, 20),
            )
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(330)
            .build_cartesian_2d(x_range, -0.5f64..n - 0.5)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("time per step (µs, log scale)")
            .x_label_formatter(&|v| micros(*v))
            .draw()
            .map_err(err)?;
        let label_style = TextStyle::from((FONT, 14).into_font())
            .pos(Pos::new(HPos::Right, VPos::Center))
            .color(&BLACK);
        for (i, row) in rows.iter().enumerate() {
            // Top to bottom in table order.
            let y = n - 1.0 - i as f64;
            let f = &row.figures;
            let c = color(i);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (x_floor(min), y - 0.3),
                        (f.quiet_p50_us.max(x_floor(min)), y + 0.3),
                    ],
                    c.filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(f.quiet_p99_us, y - 0.38), (f.quiet_p99_us, y + 0.38)],
                    BLACK.stroke_width(3),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!(
                        "p50 {} · p99 {}",
                        micros(f.quiet_p50_us),
                        micros(f.quiet_p99_us)
                    ),
                    (
                        f.quiet_p50_us.max(f.quiet_p99_us).max(x_floor(min)) * 1.25,
                        y + 0.05,
                    ),
                    TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
                )))
                .map_err(err)?;
            let (px, py) = chart.backend_coord(&(x_floor(min), y));
            let name = row.system.replace('`', "");
            root.draw(&Text::new(name, (px - 10, py - 8), label_style.clone()))
                .map_err(err)?;
            root.draw(&Text::new(
                row.setup.replace('`', ""),
                (px - 10, py + 9),
                TextStyle::from((FONT, 11).into_font())
                    .pos(Pos::new(HPos::Right, VPos::Center))
                    .color(&RGBColor(90, 90, 90)),
            ))
            .map_err(err)?;
        }
        legend_note(
            &root,
            "bar: p50 · black tick: p99 · same messages, same order, stub models",
            48,
        )?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn x_floor(min: f64) -> f64 {
    10f64.powf(min.log10().floor())
}

/// A grey explanatory line just under the chart's caption, on the right.
fn legend_note(root: &DrawingArea<SVGBackend<'_>, Shift>, text: &str, y: i32) -> Result<()> {
    let (w, _) = root.dim_in_pixel();
    root.draw(&Text::new(
        text.to_string(),
        (w as i32 - 16, y),
        TextStyle::from((FONT, 12).into_font())
            .pos(Pos::new(HPos::Right, VPos::Top))
            .color(&RGBColor(90, 90, 90)),
    ))
    .map_err(err)
}

/// Input tokens of every step: one small panel per preset, each against the unmanaged
/// baseline and the window, on a linear axis that ends just above the window (the baseline
/// leaves the panel where it outgrows the window; its peak is in the title).
pub fn input_tokens_per_step(series: &Series) -> Result<String> {
    let mut svg = String::new();
    {
        let columns = 2usize;
        let rows = series.policies.len().div_ceil(columns).max(1);
        let root =
            SVGBackend::with_string(&mut svg, (1100, 120 + 230 * rows as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let baseline_peak = series.baseline.iter().copied().max().unwrap_or(0);
        let root = root
            .titled(
                &format!(
                    "Input tokens per model call: {} (window {}; unmanaged peak {})",
                    short_name(&series.trace),
                    thousands(series.window),
                    thousands(baseline_peak)
                ),
                (FONT, 20),
            )
            .map_err(err)?;
        legend_note(
            &root,
            "black: unmanaged baseline · colour: the preset · red dashes: the window",
            2,
        )?;
        let root = root.margin(24, 0, 0, 0);
        let steps = series.baseline.len().max(2);
        let top = series
            .policies
            .iter()
            .flat_map(|p| p.input_tokens.iter())
            .copied()
            .max()
            .unwrap_or(0)
            .max(series.window) as f64
            * 1.15;
        let line = |values: &[u64]| -> Vec<(usize, f64)> {
            values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i + 1, (v as f64).min(top)))
                .collect()
        };
        let panels = root.split_evenly((rows, columns));
        for (i, (panel, policy)) in panels.iter().zip(&series.policies).enumerate() {
            let peak = policy.input_tokens.iter().copied().max().unwrap_or(0);
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!(
                        "{}: {} compactions, peak {}",
                        policy.policy,
                        policy.compactions,
                        thousands(peak)
                    ),
                    (FONT, 15),
                )
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(62)
                .build_cartesian_2d(1usize..steps, 0f64..top)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("model call")
                .y_desc("input tokens")
                .y_labels(5)
                .x_labels(8)
                .y_label_formatter(&|v| thousands(*v as u64))
                .light_line_style(WHITE)
                .draw()
                .map_err(err)?;
            chart
                .draw_series(LineSeries::new(
                    line(&series.baseline),
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?;
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(1, series.window as f64), (steps, series.window as f64)],
                    6,
                    5,
                    RED.stroke_width(1),
                ))
                .map_err(err)?;
            chart
                .draw_series(LineSeries::new(
                    line(&policy.input_tokens),
                    color(i).stroke_width(2),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A long file name shortened for a title.
fn short_name(name: &str) -> String {
    if name.chars().count() > 40 {
        format!("{}…", name.chars().take(38).collect::<String>())
    } else {
        name.to_string()
    }
}

/// Horizontal bars: throughput of every token counting benchmark.
pub fn token_counting(tokens: &TokenCounting) -> Result<String> {
    let mut svg = String::new();
    {
        let rows: Vec<_> = tokens
            .throughput
            .iter()
            .filter(|r| r.bench.starts_with("count/"))
            .collect();
        let height = 120 + 40 * rows.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let max = rows.iter().map(|r| r.mb_per_s).fold(1.0, f64::max);
        let n = rows.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption("Token counting throughput on the shared traces", (FONT, 20))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(230)
            .build_cartesian_2d((1f64..max * 3.0).log_scale(), -0.5f64..n - 0.5)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("MB/s, log scale (higher is better)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        for (i, row) in rows.iter().enumerate() {
            let y = n - 1.0 - i as f64;
            let c = if row.bench.contains("bpe-openai") {
                color(0)
            } else if row.bench.contains("tiktoken") {
                color(1)
            } else {
                color(2)
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(1.0, y - 0.3), (row.mb_per_s.max(1.0), y + 0.3)],
                    c.filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{:.1} MB/s", row.mb_per_s),
                    (row.mb_per_s.max(1.0) * 1.05, y),
                    TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
                )))
                .map_err(err)?;
            let (px, py) = chart.backend_coord(&(1.0, y));
            root.draw(&Text::new(
                row.bench.trim_start_matches("count/").to_string(),
                (px - 10, py),
                TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Two log-log panels: append p99 and load p50 against session size, one line per backend.
pub fn stores_latency(stores: &Stores) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root
            .titled("Session store latency by session size", (FONT, 22))
            .map_err(err)?;
        let panels = root.split_evenly((1, 2));
        let mut backends: Vec<&str> = stores.rows.iter().map(|r| r.backend.as_str()).collect();
        backends.dedup();
        type Pick = fn(&crate::results::StoreRow) -> f64;
        let specs: [(&str, Pick); 2] = [
            ("append p99 (one message)", |r| r.append_p99_us),
            ("load p50 (whole session)", |r| r.load_p50_us),
        ];
        for (panel, (title, pick)) in panels.iter().zip(specs) {
            let max = stores.rows.iter().map(pick).fold(1.0, f64::max);
            let min = stores
                .rows
                .iter()
                .map(pick)
                .fold(f64::MAX, f64::min)
                .max(0.5);
            let mut chart = ChartBuilder::on(panel)
                .caption(title, (FONT, 16))
                .margin(14)
                .x_label_area_size(45)
                .y_label_area_size(70)
                .build_cartesian_2d(
                    (50f64..20_000f64).log_scale(),
                    (10f64.powf(min.log10().floor())..max * 2.0).log_scale(),
                )
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("messages in the session (log)")
                .y_desc("µs (log)")
                .x_label_formatter(&|v| thousands(*v as u64))
                .y_label_formatter(&|v| thousands(*v as u64))
                .draw()
                .map_err(err)?;
            for (i, backend) in backends.iter().enumerate() {
                let c = color(i);
                let points: Vec<(f64, f64)> = stores
                    .rows
                    .iter()
                    .filter(|r| r.backend == *backend)
                    .map(|r| (r.messages as f64, pick(r).max(0.5)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(backend.to_string())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(points.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font((FONT, 12))
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{StepFigures, StoreRow, Throughput};
    use crate::series::PolicySeries;

    /// Asserts that `svg` shows every one of `needles`.
    fn assert_shows(svg: &str, needles: &[&str]) {
        for needle in needles {
            assert!(svg.contains(needle), "missing {needle:?}");
        }
    }

    #[test]
    fn the_overhead_chart_names_every_system_and_its_axis() {
        let rows: Vec<OverheadRow> = [("ctxkeeper `default`", 1.2), ("AgentScope", 450.0)]
            .into_iter()
            .map(|(system, p50)| OverheadRow {
                system: system.into(),
                setup: "setup text".into(),
                figures: StepFigures {
                    quiet_p50_us: p50,
                    quiet_p99_us: p50 * 8.0,
                    ..StepFigures::default()
                },
            })
            .collect();
        let svg = step_overhead(&rows, 16_000).expect("draws");
        assert_shows(
            &svg,
            &[
                "ctxkeeper default",
                "AgentScope",
                "time per step (µs, log scale)",
                "window 16,000",
                "p50 450 µs",
            ],
        );
    }

    #[test]
    fn the_series_chart_has_a_panel_per_policy_and_names_the_window() {
        let series = Series {
            trace: "t.jsonl".into(),
            model: "gpt-4o".into(),
            window: 16_000,
            baseline: (1..=100).map(|i| i * 1_000).collect(),
            policies: vec![PolicySeries {
                policy: "default".into(),
                input_tokens: (1..=100).map(|i| 1_000 + (i % 10) * 1_000).collect(),
                compactions: 9,
            }],
        };
        let svg = input_tokens_per_step(&series).expect("draws");
        assert_shows(
            &svg,
            &[
                "unmanaged baseline",
                "default: 9 compactions, peak 10,000",
                "window 16,000; unmanaged peak 100,000",
                "input tokens",
            ],
        );
    }

    #[test]
    fn store_and_token_charts_draw_their_rows() {
        let stores = Stores {
            rows: ["memory", "sqlite"]
                .iter()
                .flat_map(|b| {
                    [100u64, 1_000, 10_000].map(|n| StoreRow {
                        backend: b.to_string(),
                        messages: n,
                        append_p50_us: 1.0,
                        append_p99_us: 3.0,
                        load_p50_us: n as f64,
                        load_p99_us: n as f64 * 2.0,
                    })
                })
                .collect(),
            skipped: vec![],
        };
        let svg = stores_latency(&stores).expect("draws");
        assert_shows(&svg, &["sqlite", "load p50 (whole session)"]);
        let tokens = TokenCounting {
            corpus_strings: Some(10),
            corpus_mb: Some(1.0),
            first_load: vec![],
            throughput: vec![Throughput {
                bench: "count/o200k_base/bpe-openai".into(),
                mb_per_s: 21.4,
            }],
        };
        let svg = token_counting(&tokens).expect("draws");
        assert_shows(&svg, &["o200k_base/bpe-openai", "21.4 MB/s"]);
    }
}
