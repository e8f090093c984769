//! Parks near a place: the location typed (or, with one small script, the browser's own) and a
//! radius, answered with a map of the parks around it ([`crate::map`]) and a list, nearest
//! first, with the distance and the free spots per vehicle and energy type.

use askama::Template;
use axum::extract::{Query, State};
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use super::Items;
use super::Page;
use super::{call_as, page, signed_in_user, text, Chrome};
use crate::map::{self, Marker};
use crate::App;

/// Radius searched when none is given, km.
const DEFAULT_KM: &str = "10";
/// Energy types in the order the list shows them, with their names.
const ENERGY: [(&str, &str); 4] = [
    ("FUEL", "Fuel"),
    ("GPL", "LPG"),
    ("ELECTRIC", "Electric"),
    ("PLUG_IN_HYBRID", "Plug-in hybrid"),
];

/// The search as typed.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Where {
    lat: Option<String>,
    lon: Option<String>,
    km: Option<String>,
}

/// A park found.
#[derive(Debug, Clone)]
struct Found {
    number: String,
    distance: String,
    /// Free spots for cars then motorcycles, each per [`ENERGY`].
    cars: Vec<i64>,
    motorcycles: Vec<i64>,
}

#[derive(Template)]
#[template(path = "nearby.html")]
struct Nearby {
    chrome: Chrome,
    lat: String,
    lon: String,
    km: String,
    parks: Option<Vec<Found>>,
    markers: Vec<Marker>,
    width: f64,
    height: f64,
    error: Option<String>,
}

impl Nearby {
    fn energies(&self) -> Vec<&'static str> {
        ENERGY.iter().map(|(_, name)| *name).collect()
    }
}

/// Free spots of `vehicle` per [`ENERGY`] in a park's `spotTypeOccupancies`.
fn free(park: &Value, vehicle: &str) -> Vec<i64> {
    ENERGY
        .iter()
        .map(|(energy, _)| {
            park["spotTypeOccupancies"]
                .items()
                .filter(|o| o["spotVehicleType"] == vehicle && o["spotType"] == *energy)
                .filter_map(|o| o["availableSpots"].as_i64())
                .sum()
        })
        .collect()
}

/// `GET /app/nearby[?lat=&lon=&km=]`: the form, and the parks when a location was given.
pub async fn nearby(State(app): State<App>, headers: HeaderMap, Query(at): Query<Where>) -> Page {
    let (s, user) = signed_in_user(&app, &headers).await?;
    let lat = at.lat.unwrap_or_default().trim().to_owned();
    let lon = at.lon.unwrap_or_default().trim().to_owned();
    let km = at
        .km
        .filter(|k| !k.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_KM.into())
        .trim()
        .to_owned();
    let mut view = Nearby {
        chrome: Chrome::of("Parks near you", &s),
        lat,
        lon,
        km,
        parks: None,
        markers: Vec::new(),
        width: map::WIDTH,
        height: map::HEIGHT,
        error: None,
    };
    let mut status = StatusCode::OK;
    if !view.lat.is_empty() || !view.lon.is_empty() {
        let number = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
        match (number(&view.lat), number(&view.lon), number(&view.km)) {
            (Some(lat), Some(lon), Some(km)) => {
                // Numbers only reach the path; the service checks their ranges and says which
                // one is wrong.
                let path = format!("/parks/real-time/occupancy/{lat}/{lon}/{km}");
                let r = call_as(&app, &s, &user, Method::GET, &path, &Value::Null).await?;
                if r.status == StatusCode::OK {
                    let rows: Vec<&Value> = r.body.items().collect();
                    let spots: Vec<(String, f64, f64)> = rows
                        .iter()
                        .map(|p| {
                            (
                                format!("P{}", text(&p["parkId"])),
                                p["latitude"].as_f64().unwrap_or(lat),
                                p["longitude"].as_f64().unwrap_or(lon),
                            )
                        })
                        .collect();
                    view.markers = map::place(lat, lon, &spots);
                    view.parks = Some(
                        rows.iter()
                            .map(|p| Found {
                                number: text(&p["parkId"]),
                                distance: format!(
                                    "{:.1} km",
                                    p["distanceKm"].as_f64().unwrap_or(0.0)
                                ),
                                cars: free(p, "AUTOMOBILE"),
                                motorcycles: free(p, "MOTORCYCLE"),
                            })
                            .collect(),
                    );
                } else {
                    status = r.refused_status();
                    view.error = Some(r.message());
                }
            }
            _ => {
                status = StatusCode::BAD_REQUEST;
                view.error = Some(
                    "Type the latitude, longitude and distance as numbers, such as 41.1784, -8.6081 and 10."
                        .into(),
                );
            }
        }
    }
    Ok(page(&app, status, view.render(), None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn free_spots_are_read_per_vehicle_and_energy() {
        let park = json!({"spotTypeOccupancies": [
            {"spotVehicleType": "AUTOMOBILE", "spotType": "ELECTRIC", "availableSpots": 2},
            {"spotVehicleType": "AUTOMOBILE", "spotType": "FUEL", "availableSpots": 5},
            {"spotVehicleType": "MOTORCYCLE", "spotType": "FUEL", "availableSpots": 1},
        ]});
        assert_eq!(free(&park, "AUTOMOBILE"), vec![5, 0, 2, 0]);
        assert_eq!(free(&park, "MOTORCYCLE"), vec![1, 0, 0, 0]);
    }
}
