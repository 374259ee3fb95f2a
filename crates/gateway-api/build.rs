//! Compiles `proto/cloudgateway/v1` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let files = ["cloudgateway/v1/types.proto", "cloudgateway/v1/gateway.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={proto_root}/{file}");
    }
    let descriptors = protox::compile(files, [proto_root])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
