//! Finds kubectl for the test that drives it: `KUBECTL` names the binary (`make test` sets it
//! to the one `scripts/tools/setup.sh` installs). Without one that test is compiled as ignored,
//! saying why, instead of passing without running.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kubectl)");
    println!("cargo::rerun-if-env-changed=KUBECTL");
    if let Some(path) = std::env::var_os("KUBECTL").filter(|p| std::path::Path::new(p).is_file()) {
        let path = path.to_string_lossy();
        println!("cargo::rerun-if-changed={path}");
        println!("cargo::rustc-cfg=kubectl");
        println!("cargo::rustc-env=KUBECTL_BIN={path}");
    }
}
