//! The words every PMS service shares: roles (the token's `role` claim), account status, vehicle
//! types and energy sources, spelled exactly as the published API spells them and stored as the
//! same readable text, and the plate format that joins devices, parks and payments (spec §4.1,
//! §4.3, §4.7). A service's own enumerations are declared with the same [`names!`](crate::names)
//! macro in its own model. No I/O here.

/// Declares a closed set of names with `as_str`, `parse`, `ALL`, `expected` and a JSON form
/// equal to the name (both ways).
#[macro_export]
macro_rules! names {
    ($(#[doc = $doc:literal])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name as the API and the database spell it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The value with exactly this name.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The accepted names, for error messages.
            pub fn expected() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str> as $crate::__serde::Deserialize>::deserialize(d)?;
                Self::parse(&text).ok_or_else(|| {
                    <D::Error as $crate::__serde::de::Error>::custom(format!(
                        "{text:?} is not one of {}",
                        Self::expected()
                    ))
                })
            }
        }

        impl $crate::__utoipa::PartialSchema for $name {
            fn schema() -> $crate::__utoipa::openapi::RefOr<$crate::__utoipa::openapi::schema::Schema> {
                $crate::__utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type($crate::__utoipa::openapi::schema::Type::String)
                    .description(Some(
                        [$($doc),*].iter().map(|line| line.trim()).collect::<Vec<_>>().join(" "),
                    ))
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl $crate::__utoipa::ToSchema for $name {}

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names! {
    /// What a user may do; carried in the token's `role` claim.
    Role {
        /// Reads everything, changes nothing.
        Supervisor => "SUPERVISOR",
        /// A driver: manages their own vehicles, payment method and wallet.
        Customer => "CUSTOMER",
        /// Lists users and grants PARKY coins.
        CustomerManager => "CUSTOMER_MANAGER",
        /// Manages parks: spots, prices, thresholds, reports.
        ParkManager => "PARK_MANAGER",
    }
}

names! {
    /// Whether an account may log in (and, for a customer, enter a park).
    UserStatus {
        /// May log in.
        Enabled => "ENABLED",
        /// Switched off.
        Disabled => "DISABLED",
        /// Blocked (for example for unpaid sessions).
        Blocked => "BLOCKED",
    }
}

names! {
    /// Kind of vehicle.
    VehicleType {
        /// A car.
        Automobile => "AUTOMOBILE",
        /// A motorcycle.
        Motorcycle => "MOTORCYCLE",
    }
}

names! {
    /// What a vehicle runs on (and what a parking spot supplies).
    EnergySource {
        /// Petrol or diesel.
        Fuel => "FUEL",
        /// Liquefied petroleum gas.
        Gpl => "GPL",
        /// Battery electric.
        Electric => "ELECTRIC",
        /// Plug-in hybrid.
        PlugInHybrid => "PLUG_IN_HYBRID",
    }
}

/// The shapes [`plate`] accepts, as an ECMA-262 pattern for API documents.
pub const PLATE_PATTERN: &str = r"^\s*([A-Za-z]{2}-[0-9]{2}-[0-9]{2}|[0-9]{2}-[A-Za-z]{2}-[0-9]{2}|[0-9]{2}-[0-9]{2}-[A-Za-z]{2}|[A-Za-z]{2}-[0-9]{2}-[A-Za-z]{2})\s*$";

/// A Portuguese plate: `LL-NN-NN`, `NN-LL-NN`, `NN-NN-LL` or `LL-NN-LL` (letters A–Z, digits
/// 0–9). Lower-case input is upper-cased; returns the plate as stored.
///
/// # Errors
/// When it has another shape (the message says which shapes are accepted).
pub fn plate(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let groups: Vec<&str> = upper.split('-').collect();
    let kind = |g: &str| -> Option<char> {
        if g.len() != 2 {
            None
        } else if g.bytes().all(|b| b.is_ascii_uppercase()) {
            Some('L')
        } else if g.bytes().all(|b| b.is_ascii_digit()) {
            Some('N')
        } else {
            None
        }
    };
    let shape: Option<String> = if groups.len() == 3 {
        groups.iter().map(|g| kind(g)).collect()
    } else {
        None
    };
    match shape.as_deref() {
        Some("LNN" | "NLN" | "NNL" | "LNL") => Ok(upper),
        _ => Err(format!(
            "{text:?} is not a Portuguese plate (AA-00-00, 00-AA-00, 00-00-AA or AA-00-AA)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_both_ways_and_reject_others() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(*r));
            let json = serde_json::to_string(r).expect("serialize");
            assert_eq!(serde_json::from_str::<Role>(&json).expect("parse"), *r);
        }
        assert!(serde_json::from_str::<Role>("\"ADMIN\"").is_err());
        assert_eq!(
            serde_json::to_string(&EnergySource::PlugInHybrid).expect("serialize"),
            "\"PLUG_IN_HYBRID\""
        );
        assert_eq!(VehicleType::expected(), "AUTOMOBILE, MOTORCYCLE");
    }

    #[test]
    fn plates_have_four_shapes() {
        for ok in ["AA-20-CC", "28-xq-51", "55-ND-41", "19-SJ-63", " 46-ON-05 "] {
            assert!(plate(ok).is_ok(), "{ok}");
        }
        assert_eq!(plate("28-xq-51").as_deref(), Ok("28-XQ-51"));
        for bad in [
            "AA-AA-AA",
            "12-34-56",
            "AA2033",
            "A-20-CC",
            "AA-20-CC-1",
            "",
            "ÁA-20-CC",
        ] {
            assert!(plate(bad).is_err(), "{bad}");
        }
    }
}
