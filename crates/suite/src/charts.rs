//! The report's charts as inline SVG, drawn with plotters: throughput per cell with PMS and the
//! peers side by side, latency over time with the request rate, and the latency percentile
//! distribution on a log scale (HdrHistogram's plot) from the recorded histograms.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::results::{CellResult, RunRecord, Status};
use pms_bench::stats::HistogramDump;

/// One colour per system, PMS first.
const PALETTE: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
];

/// The colour of `server` among `servers`.
fn colour(servers: &[String], server: &str) -> RGBColor {
    let i = servers.iter().position(|s| s == server).unwrap_or(0);
    PALETTE[i % PALETTE.len()]
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

/// Grouped bars: for each cell of `cells`, one bar per system with its throughput. `None` when
/// no run has a throughput.
///
/// # Errors
/// A plotting failure.
pub fn throughput_bars(title: &str, cells: &[&CellResult]) -> Result<Option<String>, String> {
    let mut servers: Vec<String> = Vec::new();
    for c in cells {
        for r in &c.runs {
            if !servers.contains(&r.server) {
                servers.push(r.server.clone());
            }
        }
    }
    let value = |r: &RunRecord| {
        (r.status == Status::Ok)
            .then(|| r.metrics.get("throughput").copied())
            .flatten()
    };
    let max = cells
        .iter()
        .flat_map(|c| c.runs.iter().filter_map(value))
        .fold(0.0_f64, f64::max);
    if max <= 0.0 {
        return Ok(None);
    }
    let labels: Vec<String> = cells.iter().map(|c| short_label(c)).collect();
    let width = (160 + cells.len() * (28 * servers.len() + 24)).clamp(480, 1400) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = cells.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n, 0.0..max * 1.15)
            .map_err(err)?;
        chart
            .configure_mesh()
            .max_light_lines(2)
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|v: &f64| format!("{v:.0}"))
            .y_desc("requests per second")
            .draw()
            .map_err(err)?;
        // One label under each group, placed in pixels: tick marks would not fall on the
        // groups' centres.
        for (i, label) in labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            root.draw(&Text::new(
                label.clone(),
                (x, y + 8),
                ("sans-serif", 13)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(err)?;
        }
        let slot = 0.8 / servers.len() as f64;
        for (si, server) in servers.iter().enumerate() {
            let c = colour(&servers, server);
            let bars: Vec<Rectangle<(f64, f64)>> = cells
                .iter()
                .enumerate()
                .filter_map(|(ci, cell)| {
                    let v = cell
                        .runs
                        .iter()
                        .find(|r| &r.server == server)
                        .and_then(value)?;
                    let x0 = ci as f64 + 0.1 + si as f64 * slot;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + slot * 0.9, v)],
                        c.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(server.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// The cell's parameters without the scenario, for an axis label (`100u 500B`).
fn short_label(c: &CellResult) -> String {
    if c.part == "parking" {
        // pgbench and the barriers side by side: the whole id says which is which.
        return c.id.clone();
    }
    let parts: Vec<&str> = c.id.split('/').skip(1).collect();
    if parts.is_empty() {
        c.id.clone()
    } else {
        parts.join(" ")
    }
}

/// Mean and p99 latency (left axis) and requests per second (right axis), second by second, of
/// one run. `None` without a timeline.
///
/// # Errors
/// A plotting failure.
pub fn latency_over_time(title: &str, run: &RunRecord) -> Result<Option<String>, String> {
    let Some(out) = &run.output else {
        return Ok(None);
    };
    let ticks: Vec<_> = out.timeline.iter().filter(|t| t.requests > 0).collect();
    if ticks.is_empty() {
        return Ok(None);
    }
    let t_max = ticks.iter().map(|t| t.t_s).fold(1.0_f64, f64::max);
    let ms_max = ticks.iter().map(|t| t.p99_ms).fold(0.001_f64, f64::max) * 1.15;
    let rate_max = ticks.iter().map(|t| t.rate).fold(0.001_f64, f64::max) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .right_y_label_area_size(70)
            .build_cartesian_2d(0.0..t_max, 0.0..ms_max)
            .map_err(err)?
            .set_secondary_coord(0.0..t_max, 0.0..rate_max);
        chart
            .configure_mesh()
            .max_light_lines(2)
            .x_desc("seconds from the start")
            .y_desc("latency (ms)")
            .y_label_formatter(&|v: &f64| format!("{v:.1}"))
            .draw()
            .map_err(err)?;
        chart
            .configure_secondary_axes()
            .y_desc("requests per second")
            .y_label_formatter(&|v: &f64| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        let (blue, red, green) = (PALETTE[0], PALETTE[3], PALETTE[2]);
        chart
            .draw_series(LineSeries::new(
                ticks.iter().map(|t| (t.t_s, t.mean_ms)),
                blue.stroke_width(2),
            ))
            .map_err(err)?
            .label("mean (ms)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], blue.stroke_width(2))
            });
        chart
            .draw_series(LineSeries::new(
                ticks.iter().map(|t| (t.t_s, t.p99_ms)),
                red.stroke_width(2),
            ))
            .map_err(err)?
            .label("p99 (ms)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red.stroke_width(2)));
        chart
            .draw_secondary_series(LineSeries::new(
                ticks.iter().map(|t| (t.t_s, t.rate)),
                green.stroke_width(2),
            ))
            .map_err(err)?
            .label("requests per second (right)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], green.stroke_width(2))
            });
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// `(x, latency ms)` points of a histogram's percentile curve, x being `-log10(1 - q)` (so 90 %
/// is 1, 99 % is 2, 99.9 % is 3), up to the largest value. Points closer than
/// a thousandth of the x axis to the one kept before them are left out (a chart is 640
/// pixels wide; a histogram of a busy run has thousands of buckets), apart from the last.
pub fn percentile_curve(h: &HistogramDump) -> Vec<(f64, f64)> {
    let total: u64 = h.buckets.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut points = Vec::with_capacity(h.buckets.len() + 1);
    let mut seen = 0u64;
    let first = h.buckets.first().map_or(0.0, |(v, _)| *v as f64 / 1000.0);
    points.push((0.0, first));
    for (value, count) in &h.buckets {
        seen += count;
        let q = seen as f64 / total as f64;
        // The last bucket is 100 %: cap it where the axis ends.
        let x = if q >= 1.0 {
            MAX_NINES
        } else {
            (-(1.0 - q).log10()).min(MAX_NINES)
        };
        let point = (x, *value as f64 / 1000.0);
        // The tail stands in for every point within a step of the one before it; the newest
        // replaces it, so the curve still ends at the largest value (latency only grows).
        let n = points.len();
        match points.get(n.wrapping_sub(2)) {
            Some(before) if n >= 2 && x - before.0 < CURVE_STEP => points[n - 1] = point,
            _ => points.push(point),
        }
    }
    points
}

/// Right end of the percentile axis: 99.999 %.
const MAX_NINES: f64 = 5.0;

/// Closest two points of a percentile curve may be on the x axis: a thousandth of it.
const CURVE_STEP: f64 = MAX_NINES / 1000.0;

/// The latency percentile distribution of every system in a cell, on a log-scaled percentile
/// axis. `None` without histograms.
///
/// # Errors
/// A plotting failure.
pub fn percentiles(title: &str, cell: &CellResult) -> Result<Option<String>, String> {
    let servers: Vec<String> = cell.runs.iter().map(|r| r.server.clone()).collect();
    let curves: Vec<(&str, Vec<(f64, f64)>)> = cell
        .runs
        .iter()
        .filter_map(|r| {
            let s = r.measured()?;
            let c = percentile_curve(&s.histogram);
            (!c.is_empty()).then_some((r.server.as_str(), c))
        })
        .collect();
    if curves.is_empty() {
        return Ok(None);
    }
    let y_max = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(0.001_f64, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..MAX_NINES, 0.0..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .max_light_lines(2)
            .x_labels(6)
            .x_label_formatter(&|x: &f64| match x.round() as i64 {
                0 => "0%".into(),
                1 => "90%".into(),
                2 => "99%".into(),
                3 => "99.9%".into(),
                4 => "99.99%".into(),
                _ => "99.999%".into(),
            })
            .x_desc("percentile (log scale)")
            .y_desc("latency (ms)")
            .draw()
            .map_err(err)?;
        for (server, curve) in curves {
            let c = colour(&servers, server);
            chart
                .draw_series(LineSeries::new(curve, c.stroke_width(2)))
                .map_err(err)?
                .label(server)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_curve_puts_nines_at_whole_numbers() {
        // 90 values of 1 ms, 9 of 2 ms, 1 of 3 ms.
        let h = HistogramDump {
            unit: "us".into(),
            significant_digits: 3,
            buckets: vec![(1000, 90), (2000, 9), (3000, 1)],
        };
        let c = percentile_curve(&h);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0], (0.0, 1.0));
        assert!((c[1].0 - 1.0).abs() < 1e-9 && c[1].1 == 1.0, "{c:?}");
        assert!((c[2].0 - 2.0).abs() < 1e-9 && c[2].1 == 2.0, "{c:?}");
        assert_eq!(c[3], (MAX_NINES, 3.0));
    }

    #[test]
    fn a_busy_histogram_is_thinned_to_the_chart_width_and_keeps_its_maximum() {
        // 100,000 distinct values, one request each.
        let h = HistogramDump {
            unit: "us".into(),
            significant_digits: 3,
            buckets: (1..=100_000).map(|v| (v, 1)).collect(),
        };
        let c = percentile_curve(&h);
        assert!(c.len() <= 2_100, "{} points", c.len());
        assert!(c.len() > 500, "{} points", c.len());
        assert_eq!(c.first(), Some(&(0.0, 0.001)));
        assert_eq!(c.last(), Some(&(MAX_NINES, 100.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
