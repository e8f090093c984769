//! JWT verification cost per token, for each key family PMS supports.
//!
//! Run: `cargo bench -p pms-auth --bench verify`

use criterion::{criterion_group, criterion_main, Criterion};
use pms_auth::{Algorithm, KeySource, Signer, Verifier, VerifierConfig};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("jwt_verify");

    let secret = b"benchmark-secret-of-a-sensible-length".to_vec();
    let hs = Verifier::new(VerifierConfig::hs256(secret.clone())).expect("verifier");
    let token = Signer::hmac(Algorithm::HS256, &secret)
        .and_then(|s| s.issue("42", "CUSTOMER"))
        .expect("token");
    group.bench_function("HS256", |b| {
        b.iter(|| rt.block_on(hs.verify(std::hint::black_box(&token))).is_ok())
    });

    for (alg, rc) in [
        (Algorithm::ES256, &rcgen::PKCS_ECDSA_P256_SHA256),
        (Algorithm::EdDSA, &rcgen::PKCS_ED25519),
    ] {
        let kp = rcgen::KeyPair::generate_for(rc).expect("key");
        let v = Verifier::new(VerifierConfig {
            algorithms: vec![alg],
            keys: KeySource::PublicKeyPem(kp.public_key_pem().into_bytes()),
            ..VerifierConfig::hs256(secret.clone())
        })
        .expect("verifier");
        let token = Signer::from_pem(alg, kp.serialize_pem().as_bytes())
            .and_then(|s| s.issue("42", "CUSTOMER"))
            .expect("token");
        group.bench_function(format!("{alg:?}"), |b| {
            b.iter(|| rt.block_on(v.verify(std::hint::black_box(&token))).is_ok())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
