-- The PARKY coins a visit earned, at its park's rates when it closed (crate::rules::CoinRates):
-- what its exit said, and what a repeated exit and the invoice's goodbye say again. None for a
-- visit closed before coins were earned.
ALTER TABLE visits ADD COLUMN coins_earned BIGINT;
