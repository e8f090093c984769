//! The payments service's JSON shapes: the published `PaymentsDTO` (spec §3.4.4) field for
//! field, with what PMS adds after it (the visit, the park, the table version, the coins, the
//! status). No I/O here.

use pms_tariff::fee::RowKind;
use pms_vocab::names;
use pms_vocab::VehicleType;
use serde::Serialize;
use utoipa::ToSchema;

names! {
    /// Where an invoice stands.
    InvoiceStatus {
        /// Written; the customer's PARKY wallet is being debited for the discount.
        AwaitingCoins => "AWAITING_COINS",
        /// Final.
        Issued => "ISSUED",
        /// A price worked out on request; nothing is stored.
        Quote => "QUOTE",
    }
}

/// One line of an invoice as published: times `H:M` on the park's clock, without zero padding.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RowDto {
    /// Row id (the original's `paymentTableRowID`).
    #[serde(rename = "paymentTableRowID")]
    pub payment_table_row_id: i64,
    /// The stay's entry (the original repeated it on every row).
    pub period_start: String,
    /// The stay's exit.
    pub period_end: String,
    /// This block's start.
    pub fraction_start: String,
    /// This block's end.
    pub fraction_end: String,
    /// The vehicle type priced.
    #[schema(value_type = VehicleType)]
    pub vehicle_type: String,
    /// The amount in euros (a JSON number, as published): `blocks` × `unitPrice`.
    #[schema(value_type = f64)]
    pub price: serde_json::Value,
    /// What the line charges for (PMS).
    #[schema(value_type = RowKind)]
    pub kind: String,
    /// How many blocks of one length and price the line charges for, one after another (PMS):
    /// 1, except for the repeats of a period's last block, which are one line per stretch of the
    /// period within a day.
    #[schema(minimum = 1)]
    pub blocks: u32,
    /// The price of one of them (PMS).
    #[schema(value_type = f64)]
    pub unit_price: serde_json::Value,
}

impl RowDto {
    /// The line's `price` and `unitPrice` from its amount and blocks.
    pub fn amounts(
        price: rust_decimal::Decimal,
        blocks: u32,
    ) -> (serde_json::Value, serde_json::Value) {
        let unit = price / rust_decimal::Decimal::from(blocks.max(1));
        (
            pms_tariff::json::money(price),
            pms_tariff::json::money(unit),
        )
    }
}

/// An invoice as published, plus PMS's fields after the published ones.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentsDto {
    /// Invoice id (`null` for a quote).
    pub invoice: Option<i64>,
    /// PARKY discount, euros.
    #[schema(value_type = f64)]
    pub discount: serde_json::Value,
    /// What the customer pays: the rows' total less the discount.
    #[schema(value_type = f64)]
    pub final_price: serde_json::Value,
    /// The customer's tax number.
    pub nif: i64,
    /// The lines.
    #[serde(rename = "paymentsTableRowsDTO")]
    pub payments_table_rows_dto: Vec<RowDto>,
    /// The sum of the rows (PMS).
    #[schema(value_type = f64)]
    pub total: serde_json::Value,
    /// Coins spent (PMS).
    pub coins: i64,
    /// Where the invoice stands.
    #[schema(value_type = InvoiceStatus)]
    pub status: String,
    /// The visit billed (PMS).
    pub visit_id: Option<i64>,
    /// The park (PMS).
    pub park_id: i64,
    /// The plate (PMS).
    #[schema(value_type = pms_service::openapi::Plate)]
    pub license_plate_number: String,
    /// Entry, RFC 3339 UTC (PMS).
    #[schema(format = DateTime)]
    pub enter_park: String,
    /// Exit, RFC 3339 UTC (PMS).
    #[schema(format = DateTime)]
    pub left_park: String,
    /// The version of the park's price table it was priced with (PMS).
    pub price_table_version: i64,
    /// The park's clock (IANA zone) its times of day were read on (PMS).
    #[schema(example = "Europe/Lisbon")]
    pub time_zone: String,
}
