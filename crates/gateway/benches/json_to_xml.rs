//! JSON→XML converter throughput (MB/s of JSON input) on the published ARRAY payloads.
//!
//! Run: `cargo bench -p pms-gateway --bench json_to_xml`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pms_gateway::transform::{convert, XmlLayout};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("json_to_xml");
    for size in [50usize, 1024, 10 * 1024, 100 * 1024] {
        let json = pms_testkit::payload::array(size);
        group.throughput(Throughput::Bytes(json.len() as u64));
        for (name, layout) in [
            ("ballerina-compat", XmlLayout::BallerinaCompat),
            (
                "generic",
                XmlLayout::Generic {
                    root: "root".into(),
                },
            ),
        ] {
            group.bench_with_input(BenchmarkId::new(name, size), &json, |b, json| {
                b.iter(|| convert(std::hint::black_box(json), &layout).map(|x| x.len()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
