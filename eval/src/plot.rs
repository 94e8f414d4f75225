//! `--plot FILE.svg`: recall against index size and against speed across the settings (LexLIP
//! Table 2 as two charts), written as plain SVG.
//!
//! Two panels: recall (%) against bytes per item, and against queries per second. Four series
//! (text → image and image → text, R@10 solid and R@1 dashed), one point per setting, each point
//! labelled with its K ("full" for full vectors).

use std::fmt::Write;

use crate::report::SettingReport;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 470.0;
const PANEL_WIDTH: f64 = 400.0;
const PANEL_HEIGHT: f64 = 300.0;
/// Left edges of the two panels, and their common top edge.
const PANEL_LEFT: [f64; 2] = [80.0, 580.0];
const PANEL_TOP: f64 = 100.0;

/// A number read off a setting (a recall, bytes per item, QPS).
type Measure = fn(&SettingReport) -> f64;

/// A direction's recalls of a setting (at 1, 5 and 10).
type Recalls = fn(&SettingReport) -> &[f64; 3];

/// The two directions, each in its colour.
const DIRECTIONS: [(&str, &str, Recalls); 2] = [
    ("text→image", "#1f77b4", |s| &s.t2i),
    ("image→text", "#d62728", |s| &s.i2t),
];

/// The recalls drawn of each direction: R@10 solid, R@1 dashed (with its place in
/// [`Recalls`]).
const CUTS: [(&str, usize, bool); 2] = [("R@10", 2, false), ("R@1", 0, true)];

struct Series {
    name: String,
    colour: &'static str,
    dashed: bool,
    recalls: Recalls,
    /// Which of `recalls`.
    at: usize,
}

impl Series {
    /// The recall this series draws of `s`.
    fn value(&self, s: &SettingReport) -> f64 {
        (self.recalls)(s)[self.at]
    }
}

/// Every direction at every cut, R@10 first.
fn series() -> Vec<Series> {
    CUTS.iter()
        .flat_map(|&(cut, at, dashed)| {
            DIRECTIONS
                .iter()
                .map(move |&(direction, colour, recalls)| Series {
                    name: format!("{direction} {cut}"),
                    colour,
                    dashed,
                    recalls,
                    at,
                })
        })
        .collect()
}

/// The SVG document for `settings`, titled `title`.
pub fn svg(title: &str, settings: &[SettingReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    legend(&mut out);
    let all = series();
    let recalls: Vec<f64> = settings
        .iter()
        .flat_map(|s| all.iter().map(move |series| 100.0 * series.value(s)))
        .collect();
    let y = Axis::new(&recalls, Some((0.0, 100.0)));
    let panels: [(&str, Measure); 2] = [
        ("index bytes per item", |s| s.bytes_per_item),
        ("queries per second (search alone, one thread)", |s| s.qps),
    ];
    for ((x_name, x_of), left) in panels.into_iter().zip(PANEL_LEFT) {
        let xs: Vec<f64> = settings.iter().map(x_of).collect();
        let x = Axis::new(&xs, None);
        panel(&mut out, left, x_name, &x, &y, settings, x_of);
    }
    out.push_str("</svg>\n");
    out
}

fn legend(out: &mut String) {
    let mut at = 150.0;
    for s in &series() {
        let _ = writeln!(
            out,
            r#"<line x1="{at}" y1="50" x2="{}" y2="50" stroke="{}" stroke-width="2"{}/>"#,
            at + 28.0,
            s.colour,
            dash(s.dashed)
        );
        let _ = writeln!(
            out,
            r#"<circle cx="{}" cy="50" r="4" fill="{}"/>"#,
            at + 14.0,
            fill(s)
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="54">{}</text>"#,
            at + 34.0,
            escape(&s.name)
        );
        at += 180.0;
    }
}

fn dash(dashed: bool) -> &'static str {
    if dashed {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    }
}

/// R@10 points are filled, R@1 points hollow (white with a coloured edge).
fn fill(s: &Series) -> &'static str {
    if s.dashed { "white" } else { s.colour }
}

/// One chart: axes with ticks and names, then each series as a line through its points.
fn panel(
    out: &mut String,
    left: f64,
    x_name: &str,
    x: &Axis,
    y: &Axis,
    settings: &[SettingReport],
    x_of: Measure,
) {
    let (top, bottom, right) = (PANEL_TOP, PANEL_TOP + PANEL_HEIGHT, left + PANEL_WIDTH);
    let px = |v: f64| left + PANEL_WIDTH * x.fraction(v);
    let py = |v: f64| bottom - PANEL_HEIGHT * y.fraction(v);
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" fill="none" stroke="#333"/>"##
    );
    for t in &x.ticks {
        let at = px(*t);
        let _ = writeln!(
            out,
            r##"<line x1="{at:.1}" y1="{top}" x2="{at:.1}" y2="{bottom}" stroke="#e5e5e5"/><text x="{at:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 16.0,
            x.format(*t)
        );
    }
    for t in &y.ticks {
        let at = py(*t);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{at:.1}" x2="{right}" y2="{at:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left - 6.0,
            at + 4.0,
            y.format(*t)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + PANEL_WIDTH / 2.0,
        bottom + 40.0,
        escape(x_name)
    );
    let (cx, cy) = (left - 50.0, top + PANEL_HEIGHT / 2.0);
    let _ = writeln!(
        out,
        r#"<text x="{cx}" y="{cy}" text-anchor="middle" transform="rotate(-90 {cx} {cy})">recall (%)</text>"#
    );
    for s in &series() {
        let points: Vec<(f64, f64, String)> = settings
            .iter()
            .map(|st| {
                let k = match (st.search, st.top_k) {
                    ("exact", Some(k)) => k.to_string(),
                    _ => st.label(),
                };
                (px(x_of(st)), py(100.0 * s.value(st)), k)
            })
            .collect();
        let line: Vec<String> = points
            .iter()
            .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"{}/>"#,
            line.join(" "),
            s.colour,
            dash(s.dashed)
        );
        for (x, y, k) in &points {
            let _ = writeln!(
                out,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{}" stroke="{}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{}">{}</text>"#,
                fill(s),
                s.colour,
                x + 6.0,
                y - 6.0,
                s.colour,
                escape(k)
            );
        }
    }
}

/// A linear axis over round ticks that cover the values.
struct Axis {
    lo: f64,
    hi: f64,
    step: f64,
    ticks: Vec<f64>,
}

impl Axis {
    /// Covers `values` (within `clamp` when given); a single value gets some room around it.
    fn new(values: &[f64], clamp: Option<(f64, f64)>) -> Self {
        let finite = values.iter().copied().filter(|v| v.is_finite());
        let (mut lo, mut hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        if lo > hi {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo < 1e-9 {
            let pad = if lo.abs() > 1e-9 { lo.abs() * 0.1 } else { 1.0 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step((hi - lo) / 5.0);
        lo = (lo / step).floor() * step;
        hi = (hi / step).ceil() * step;
        if let Some((min, max)) = clamp {
            lo = lo.max(min);
            hi = hi.min(max);
        }
        let ticks = (0..)
            .map(|i| lo + step * f64::from(i))
            .take_while(|t| *t <= hi + step * 1e-6)
            .collect();
        Self {
            lo,
            hi,
            step,
            ticks,
        }
    }

    /// Where `v` lies between the ends, 0 to 1.
    fn fraction(&self, v: f64) -> f64 {
        ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0)
    }

    /// A tick label with as many decimals as the step needs.
    fn format(&self, v: f64) -> String {
        let decimals = (-self.step.log10().floor()).max(0.0) as usize;
        format!("{v:.decimals$}")
    }
}

/// 1, 2 or 5 times a power of ten, near `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(top_k: Option<usize>, bytes: f64, qps: f64, r10: f64) -> SettingReport {
        SettingReport {
            top_k,
            search: "exact",
            approx: None,
            term_cut: None,
            t2i_queries: 1,
            i2t_queries: 1,
            t2i: [r10 / 2.0, r10 * 0.8, r10],
            i2t: [r10 / 3.0, r10 * 0.9, r10],
            i2i: None,
            t2t: None,
            i2i_queries: None,
            t2t_queries: None,
            bytes_per_item: bytes,
            bytes_per_image: bytes,
            vector_bytes_per_image: bytes,
            nnz_per_item: 0.0,
            nnz_per_image: 0.0,
            nnz_per_text: 0.0,
            qps,
            t2i_qps: qps,
            i2t_qps: qps,
            index_bytes: 0,
            index_seconds: 0.0,
            rerank: None,
            t2i_overlap: None,
            i2t_overlap: None,
            rankings: Default::default(),
        }
    }

    /// Element names in document order, with a check that every element is closed in order
    /// (a small well-formedness check of the tags this module writes).
    fn elements(svg: &str) -> Vec<String> {
        let mut open: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("every tag ends") + start;
            let tag = &rest[start + 1..end];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing </{name}>");
            } else {
                let name = tag.split_whitespace().next().unwrap().trim_end_matches('/');
                seen.push(name.to_string());
                if !tag.ends_with('/') {
                    open.push(name.to_string());
                }
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        seen
    }

    #[test]
    fn two_panels_four_series_points_labelled_with_k() {
        let settings = [
            setting(None, 900.0, 2000.0, 0.8),
            setting(Some(64), 500.0, 5000.0, 0.7),
            setting(Some(8), 120.0, 20000.0, 0.3),
        ];
        let svg = svg("model <a> & corpus", &settings);
        let elements = elements(&svg);
        assert_eq!(elements[0], "svg");
        // 2 panels × 4 series: one line each, one point per setting.
        assert_eq!(elements.iter().filter(|e| *e == "polyline").count(), 8);
        assert_eq!(
            elements.iter().filter(|e| *e == "circle").count(),
            8 * 3 + 4
        );
        for label in [
            ">full<",
            ">64<",
            ">8<",
            "recall (%)",
            "index bytes per item",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(svg.contains("model &lt;a&gt; &amp; corpus"));
        assert!(svg.contains("queries per second"));
    }

    #[test]
    fn axes_cover_the_values_with_round_ticks() {
        let a = Axis::new(&[123.0, 987.0], None);
        assert_eq!((a.lo, a.hi, a.step), (0.0, 1000.0, 200.0));
        assert!(a.ticks.len() >= 5 && a.ticks.iter().all(|t| t % 200.0 == 0.0));
        // Recall stays within 0-100; one value gets room around it.
        let r = Axis::new(&[0.0, 100.0], Some((0.0, 100.0)));
        assert_eq!((r.lo, r.hi), (0.0, 100.0));
        let one = Axis::new(&[50.0], None);
        assert!(one.lo < 50.0 && one.hi > 50.0);
        assert_eq!(Axis::new(&[0.25, 0.75], None).format(0.5), "0.5");
        // Degenerate inputs still give a usable axis.
        let none = Axis::new(&[], None);
        assert!(none.hi > none.lo && none.fraction(0.5).is_finite());
    }
}
