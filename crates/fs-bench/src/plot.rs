//! The SVG plots, drawn with plotters.

use std::path::Path;

use fs_rename::Strategy;
use plotters::prelude::*;

use crate::measure::BackendResults;

const COLORS: [RGBColor; 6] = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];

/// Documents per second against N, for the rename and the raw rewrite, per backend.
pub fn rename_throughput(results: &[BackendResults], path: &Path) -> anyhow::Result<()> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in results {
        series.push((
            format!("{} rename", r.name),
            r.renames
                .iter()
                .map(|x| (x.docs as f64, x.rate()))
                .collect(),
        ));
        series.push((
            format!("{} raw bulk", r.name),
            r.renames
                .iter()
                .map(|x| (x.docs as f64, x.raw_rate()))
                .collect(),
        ));
    }
    draw(
        path,
        "Directory rename vs raw bulk rewrite",
        "documents renamed (N)",
        "documents / s",
        &series,
    )
}

/// Renames per second against K, one panel per backend, one line per locking scheme (the
/// same colour in every panel).
pub fn concurrency(results: &[BackendResults], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (420 * results.len().max(1) as u32, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((1, results.len().max(1)));
    for (r, area) in results.iter().zip(panels.iter()) {
        let series: Vec<(String, Vec<(f64, f64)>)> = [
            Strategy::Tree,
            Strategy::Document,
            Strategy::Global,
            Strategy::None,
        ]
        .into_iter()
        .map(|st| {
            let points = r
                .concurrency
                .iter()
                .filter(|c| c.strategy == st && c.protocol == fs_locks::LockProtocol::Auto)
                .map(|c| (c.k as f64, c.per_sec))
                .collect();
            let name = if st == Strategy::None {
                "no locks (the store's ceiling)".to_owned()
            } else {
                format!("{st} locks")
            };
            (name, points)
        })
        .collect();
        let title = format!("{}: K concurrent disjoint renames", r.name);
        draw_on(area, &title, "concurrent jobs (K)", "renames / s", &series)?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn draw(
    path: &Path,
    title: &str,
    x: &str,
    y: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    draw_on(&root, title, x, y, series)?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Draws `series` on log-log axes in `area`.
fn draw_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x: &str,
    y: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (1.0f64, 1.0f64);
    let (mut x_min, mut y_min) = (f64::MAX, f64::MAX);
    for &(px, py) in points {
        x_max = x_max.max(px);
        y_max = y_max.max(py);
        x_min = x_min.min(px);
        y_min = y_min.min(py.max(1e-3));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_min.min(x_max) * 0.8..x_max * 1.25).log_scale(),
            (y_min * 0.5..y_max * 2.0).log_scale(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(x)
        .y_desc(y)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let style = if i >= COLORS.len() {
            color.stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name.as_str())
            .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 20, ly)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
