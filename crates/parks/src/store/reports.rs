//! The park reports, kept current by every entrance and exit (the original looked its daily row
//! up with the arguments swapped, so it wrote one row per entrance and never the parking time):
//! the vehicle and energy mix, and the minutes parked per customer by day, month or year (days
//! on the park's clock; months 0-based, as published).

use pms_service::repeatable;
use serde::Serialize;

use super::{Store, StoreError};
use crate::model::ReportPeriod;
use crate::rules;

/// Sums of the report columns: total, cars, motorcycles, fuel, GPL, electric, plug-in hybrid.
type Sums = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// `GET /parkReport/percentageOf/{parkId}`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Percentages {
    /// Cars, % of all vehicles.
    pub percentage_car: f64,
    /// Motorcycles, %.
    pub percentage_motorcycle: f64,
    /// Fuel, %.
    pub percentage_fuel: f64,
    /// GPL, % (spelled as published).
    #[serde(rename = "percentageGPL")]
    pub percentage_gpl: f64,
    /// Electric, %.
    pub percentage_electric: f64,
    /// Plug-in hybrids, % (the original counted them in no bucket).
    pub percentage_plug_in_hybrid: f64,
    /// Vehicles counted.
    pub total_vehicles: i64,
}

/// One row of `GET /parkReport/parkingTime/{parkId}/{period}`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParkingTime {
    /// Customer (user) id.
    pub customer_id: i64,
    /// Minutes parked in the period.
    pub time_period: f64,
    /// Year.
    pub year: i64,
    /// Month, 0-based (0 for a year row).
    pub month: i64,
    /// Day of the month (0 for month and year rows).
    pub day: i64,
}

impl Store {
    /// The vehicle and energy mix of every entrance to park id `park_id`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; database failures.
    pub async fn percentages(&self, park_id: i64) -> Result<Percentages, StoreError> {
        self.park_by_id(park_id).await?;
        let sums: Sums = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT CAST(SUM(total_vehicles) AS BIGINT), CAST(SUM(cars) AS BIGINT), \
                 CAST(SUM(motorcycles) AS BIGINT), CAST(SUM(fuel) AS BIGINT), CAST(SUM(gpl) AS BIGINT), \
                 CAST(SUM(electric) AS BIGINT), CAST(SUM(plug_in_hybrid) AS BIGINT) \
                 FROM park_reports WHERE park_id = $1"
            )
            .bind(park_id)
            .fetch_one(&mut *conn)
            .await
        })?;
        let total = sums.0.unwrap_or(0);
        let pct = |n: Option<i64>| {
            if total == 0 {
                0.0
            } else {
                n.unwrap_or(0) as f64 / total as f64 * 100.0
            }
        };
        Ok(Percentages {
            percentage_car: pct(sums.1),
            percentage_motorcycle: pct(sums.2),
            percentage_fuel: pct(sums.3),
            percentage_gpl: pct(sums.4),
            percentage_electric: pct(sums.5),
            percentage_plug_in_hybrid: pct(sums.6),
            total_vehicles: total,
        })
    }

    /// Minutes parked per customer in park id `park_id`, by `period`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; database failures.
    pub async fn parking_time(
        &self,
        park_id: i64,
        period: ReportPeriod,
    ) -> Result<Vec<ParkingTime>, StoreError> {
        self.park_by_id(park_id).await?;
        let rows: Vec<(String, i64, i64)> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT day, customer_id, minutes FROM park_time_reports WHERE park_id = $1 ORDER BY day, customer_id"
        )
        .bind(park_id)
        .fetch_all(&mut *conn)
        .await
        })?;
        let mut out: Vec<ParkingTime> = Vec::new();
        for (day, customer, minutes) in rows {
            let Some((y, m, d)) = rules::report_parts(&day) else {
                continue;
            };
            let (m, d) = match period {
                ReportPeriod::Day => (m, d),
                ReportPeriod::Month => (m, 0),
                ReportPeriod::Year => (0, 0),
            };
            match out
                .iter_mut()
                .find(|r| r.customer_id == customer && r.year == y && r.month == m && r.day == d)
            {
                Some(r) => r.time_period += minutes as f64,
                None => out.push(ParkingTime {
                    customer_id: customer,
                    time_period: minutes as f64,
                    year: y,
                    month: m,
                    day: d,
                }),
            }
        }
        Ok(out)
    }
}
