//! Where the parks lie around a person, drawn on the server as inline SVG: the person at the
//! centre, each park a marker at its bearing and distance (an equirectangular projection, true
//! enough over a city's few kilometres), scaled so the farthest park sits near the edge. No
//! map tiles: the markers, distances and free spots need nothing from the internet.
//!
//! Parks close together (or close to the person) would draw on top of each other, so markers
//! nearer than [`GAP`] are pushed apart, a little at a time, until none overlap: the drawing
//! says roughly where, the list beside it says exactly how far.

/// Size of the drawing, in SVG units (it scales to the page).
pub const WIDTH: f64 = 400.0;
/// Height of the drawing.
pub const HEIGHT: f64 = 300.0;
/// Margin kept free around the farthest marker.
const MARGIN: f64 = 40.0;
/// Least distance between two markers' centres (their circles have a radius of 12), and
/// between a marker and the person's dot (radius 6).
pub const GAP: f64 = 26.0;
/// Least distance between a marker and the person at the centre.
pub const GAP_TO_YOU: f64 = 20.0;

/// A park placed on the drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// The park's label (`P3`).
    pub label: String,
    /// Across, from the left.
    pub x: f64,
    /// Down, from the top.
    pub y: f64,
}

/// Places parks at `(label, latitude, longitude)` around `(lat, lon)`, which sits at the centre.
pub fn place(lat: f64, lon: f64, parks: &[(String, f64, f64)]) -> Vec<Marker> {
    let squeeze = lat.to_radians().cos();
    let offsets: Vec<(f64, f64)> = parks
        .iter()
        .map(|(_, plat, plon)| ((plon - lon) * squeeze, plat - lat))
        .collect();
    let reach = offsets
        .iter()
        .map(|(dx, dy)| dx.abs().max(dy.abs()))
        .filter(|r| r.is_finite())
        .fold(0.0_f64, f64::max);
    let half = (WIDTH.min(HEIGHT) / 2.0) - MARGIN;
    let scale = if reach > 0.0 { half / reach } else { 0.0 };
    let mut markers: Vec<Marker> = parks
        .iter()
        .zip(offsets)
        .map(|((label, _, _), (dx, dy))| Marker {
            label: label.clone(),
            x: WIDTH / 2.0 + dx * scale,
            // North is up.
            y: HEIGHT / 2.0 - dy * scale,
        })
        .collect();
    spread(&mut markers);
    for m in &mut markers {
        m.x = m.x.round();
        m.y = m.y.round();
    }
    markers
}

/// Pushes apart markers nearer than [`GAP`] to each other or [`GAP_TO_YOU`] to the centre,
/// keeping them on the drawing. Each pass moves each overlapping pair half the overlap apart
/// (along the line between them; markers on the same spot split by their order), so a few
/// dozen passes settle any handful of parks.
fn spread(markers: &mut [Marker]) {
    let (cx, cy) = (WIDTH / 2.0, HEIGHT / 2.0);
    for _ in 0..64 {
        let mut moved = false;
        for i in 0..markers.len() {
            for j in i + 1..markers.len() {
                let (dx, dy) = (markers[j].x - markers[i].x, markers[j].y - markers[i].y);
                let d = dx.hypot(dy);
                if d < GAP {
                    let (ux, uy) = if d > 0.01 {
                        (dx / d, dy / d)
                    } else {
                        let a = j as f64;
                        (a.cos(), a.sin())
                    };
                    let push = (GAP - d) / 2.0 + 0.5;
                    markers[i].x -= ux * push;
                    markers[i].y -= uy * push;
                    markers[j].x += ux * push;
                    markers[j].y += uy * push;
                    moved = true;
                }
            }
            let m = &mut markers[i];
            let (dx, dy) = (m.x - cx, m.y - cy);
            let d = dx.hypot(dy);
            if d < GAP_TO_YOU {
                let (ux, uy) = if d > 0.01 {
                    (dx / d, dy / d)
                } else {
                    (0.0, -1.0)
                };
                m.x = cx + ux * (GAP_TO_YOU + 0.5);
                m.y = cy + uy * (GAP_TO_YOU + 0.5);
                moved = true;
            }
        }
        for m in markers.iter_mut() {
            m.x = m.x.clamp(12.0, WIDTH - 12.0);
            m.y = m.y.clamp(12.0, HEIGHT - 12.0);
        }
        if !moved {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn north_is_up_east_is_right_and_the_farthest_sits_inside_the_margin() {
        let m = place(
            41.0,
            -8.0,
            &[
                ("N".into(), 41.1, -8.0),
                ("E".into(), 41.0, -7.9),
                ("S".into(), 40.95, -8.0),
            ],
        );
        let half = HEIGHT / 2.0 - MARGIN;
        assert_eq!(
            (m[0].x, m[0].y),
            (WIDTH / 2.0, (HEIGHT / 2.0 - half).round())
        );
        assert!(
            m[1].x > WIDTH / 2.0 && m[1].x < WIDTH / 2.0 + half,
            "east, squeezed by latitude"
        );
        assert!(m[2].y > HEIGHT / 2.0, "south is down");
        let here = place(41.0, -8.0, &[("here".into(), 41.0, -8.0)]);
        assert_eq!(here[0].x, WIDTH / 2.0, "moved off the person, straight up");
        assert!(here[0].y < HEIGHT / 2.0 - GAP_TO_YOU + 1.0);
    }

    /// Issue 58: at the demo location (Porto) with a radius reaching Aveiro, P2, P5 and the
    /// person drew on top of each other.
    #[test]
    fn markers_never_overlap_each_other_or_the_person() {
        let parks: Vec<(String, f64, f64)> = vec![
            ("P1".into(), 40.36841685539075, -8.659655996430294),
            ("P2".into(), 41.15932631626018, -8.659665314733802),
            ("P3".into(), 40.63197951206417, -8.631234173497187),
            ("P4".into(), 41.538183003885216, -8.431420332359862),
            ("P5".into(), 41.17643631180696, -8.55806931330527),
        ];
        assert_apart(&place(41.1784, -8.6081, &parks));
        // Every park on one spot, and on the person.
        let same: Vec<(String, f64, f64)> = (0..6).map(|i| (format!("P{i}"), 41.0, -8.0)).collect();
        assert_apart(&place(41.0, -8.0, &same));
    }

    fn assert_apart(markers: &[Marker]) {
        let (cx, cy) = (WIDTH / 2.0, HEIGHT / 2.0);
        for (i, a) in markers.iter().enumerate() {
            assert!(
                (a.x - cx).hypot(a.y - cy) >= GAP_TO_YOU - 1.0,
                "{a:?} on the person"
            );
            assert!(
                (0.0..=WIDTH).contains(&a.x) && (0.0..=HEIGHT).contains(&a.y),
                "{a:?}"
            );
            for b in &markers[i + 1..] {
                assert!((a.x - b.x).hypot(a.y - b.y) >= GAP - 1.0, "{a:?} on {b:?}");
            }
        }
    }
}
