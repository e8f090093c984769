//! Where the parks lie around a person, drawn on the server as inline SVG: the person at the
//! centre, each park a marker at its bearing and distance (an equirectangular projection, true
//! enough over a city's few kilometres), scaled so the farthest park sits near the edge. No
//! map tiles: the markers, distances and free spots need nothing from the internet.

/// Size of the drawing, in SVG units (it scales to the page).
pub const WIDTH: f64 = 400.0;
/// Height of the drawing.
pub const HEIGHT: f64 = 300.0;
/// Margin kept free around the farthest marker.
const MARGIN: f64 = 40.0;

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
    parks
        .iter()
        .zip(offsets)
        .map(|((label, _, _), (dx, dy))| Marker {
            label: label.clone(),
            x: (WIDTH / 2.0 + dx * scale).round(),
            // North is up.
            y: (HEIGHT / 2.0 - dy * scale).round(),
        })
        .collect()
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
        assert_eq!(
            place(41.0, -8.0, &[("here".into(), 41.0, -8.0)])[0].x,
            WIDTH / 2.0
        );
    }
}
