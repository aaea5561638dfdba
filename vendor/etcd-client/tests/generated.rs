//! The code in `src/generated` is what `proto/` gives: generated again
//! here, as upstream's build script generates it (tonic-prost-build, no
//! server), with the protoc of `protoc-bin-vendored` — so neither this
//! test nor any build needs a protoc installed — and compared byte for
//! byte. To regenerate after changing `proto/` (a new upstream version):
//! `LEASEHOLD_REGENERATE=1 cargo test -p leasehold-etcd-client --test generated`.

use std::path::Path;

const PACKAGES: [&str; 5] = [
    "authpb",
    "etcdserverpb",
    "mvccpb",
    "v3electionpb",
    "v3lockpb",
];

#[test]
fn the_checked_in_code_is_what_the_protos_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().expect("a temporary directory");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path().expect("the vendored protoc"));
    let protos = [
        "auth.proto",
        "kv.proto",
        "rpc.proto",
        "v3election.proto",
        "v3lock.proto",
    ]
    .map(|p| root.join("proto").join(p));
    tonic_prost_build::configure()
        .build_server(false)
        .out_dir(out.path())
        .compile_with_config(config, &protos, &[root.join("proto")])
        .expect("generate the code");
    let regenerate = std::env::var_os("LEASEHOLD_REGENERATE").is_some();
    for package in PACKAGES {
        let generated =
            std::fs::read_to_string(out.path().join(format!("{package}.rs"))).expect("generated");
        let kept = root.join("src/generated").join(format!("{package}.rs"));
        if regenerate {
            std::fs::write(&kept, &generated).expect("write the generated code");
            continue;
        }
        let checked_in = std::fs::read_to_string(&kept).expect("checked in");
        assert!(
            generated == checked_in,
            "src/generated/{package}.rs is not what proto/ gives: regenerate it (see this test's docs)"
        );
    }
}
