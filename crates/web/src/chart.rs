//! Bar charts drawn on the server as inline SVG: the geometry is computed here and the template
//! writes the elements, so a chart needs no script, no image request and no inline style (the
//! Content-Security-Policy allows none). Colours come from the stylesheet's classes. Each chart
//! is one horizontal bar per item, which reads well on a phone, and the page shows the same
//! numbers in a table for screen readers and copying.

/// Width of the drawing, in SVG units (it scales to the page).
const WIDTH: f64 = 360.0;
/// Room for the labels, left of the bars.
const LABEL_WIDTH: f64 = 110.0;
/// Room for the value, right of the longest bar.
const VALUE_WIDTH: f64 = 90.0;
/// Height of one row.
const ROW: f64 = 30.0;
/// Height of one bar.
const BAR: f64 = 20.0;

/// One bar, placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// What it counts.
    pub label: String,
    /// The value as the chart writes it (`42.5 %`, `3 h 20 min`).
    pub text: String,
    /// Top of the bar.
    pub y: f64,
    /// Length of the bar.
    pub width: f64,
    /// Baseline of the row's text.
    pub text_y: f64,
    /// Where the value's text starts.
    pub value_x: f64,
}

/// A placed bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// What it shows, for its accessible name.
    pub title: String,
    /// The bars, top to bottom.
    pub bars: Vec<Bar>,
    /// Width of the drawing.
    pub width: f64,
    /// Height of the drawing.
    pub height: f64,
    /// Where the bars start.
    pub bar_x: f64,
    /// Where the labels end.
    pub label_x: f64,
}

impl Chart {
    /// A chart of `items` (label, value, value as written), bars scaled so the largest fills
    /// the width (or to `full` when given, as for percentages). Negative or non-finite values
    /// draw as empty bars.
    pub fn bars(title: &str, items: Vec<(String, f64, String)>, full: Option<f64>) -> Self {
        let largest = items
            .iter()
            .map(|(_, v, _)| *v)
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        let scale = full.unwrap_or(largest);
        let room = WIDTH - LABEL_WIDTH - VALUE_WIDTH;
        let bars: Vec<Bar> = items
            .into_iter()
            .enumerate()
            .map(|(i, (label, value, text))| {
                let share = if scale > 0.0 && value.is_finite() && value > 0.0 {
                    (value / scale).min(1.0)
                } else {
                    0.0
                };
                let width = (share * room).round();
                let top = ROW * i as f64;
                Bar {
                    label,
                    text,
                    y: top + (ROW - BAR) / 2.0,
                    width,
                    text_y: top + ROW / 2.0 + 5.0,
                    value_x: LABEL_WIDTH + width + 6.0,
                }
            })
            .collect();
        Self {
            title: title.to_owned(),
            height: (ROW * bars.len() as f64).max(ROW),
            bars,
            width: WIDTH,
            bar_x: LABEL_WIDTH,
            label_x: LABEL_WIDTH - 6.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_bar_fills_the_room_and_the_others_scale_with_it() {
        let c = Chart::bars(
            "t",
            vec![
                ("a".into(), 50.0, "50".into()),
                ("b".into(), 25.0, "25".into()),
                ("c".into(), -3.0, "-3".into()),
                ("d".into(), f64::NAN, "?".into()),
            ],
            None,
        );
        let room = WIDTH - LABEL_WIDTH - VALUE_WIDTH;
        assert_eq!(c.bars[0].width, room);
        assert_eq!(c.bars[1].width, (room / 2.0).round());
        assert_eq!((c.bars[2].width, c.bars[3].width), (0.0, 0.0));
        assert!(c.bars[1].y > c.bars[0].y, "top to bottom");
        assert_eq!(c.height, 4.0 * ROW);
    }

    #[test]
    fn a_fixed_scale_keeps_shares_as_they_are() {
        let c = Chart::bars("t", vec![("a".into(), 25.0, "25 %".into())], Some(100.0));
        let room = WIDTH - LABEL_WIDTH - VALUE_WIDTH;
        assert_eq!(c.bars[0].width, (room / 4.0).round());
        let empty = Chart::bars("t", Vec::new(), None);
        assert!(empty.bars.is_empty());
        assert_eq!(empty.height, ROW, "an empty chart still has a size");
    }
}
