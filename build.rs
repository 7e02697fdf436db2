//! Build script: with the `inference` feature, binaries and tests find libtorch where
//! LIBTORCH points (torch-sys's own rpath does not reach the final binary), and a CUDA
//! libtorch's CUDA library is kept in the binary.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if std::env::var_os("CARGO_FEATURE_INFERENCE").is_none() {
        return;
    }
    if let Some(libtorch) = std::env::var_os("LIBTORCH") {
        let lib = std::path::Path::new(&libtorch).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
        // Nothing calls into libtorch_cuda directly: it registers CUDA with libtorch when it
        // is loaded. The linker's --as-needed would drop it, and libtorch would then report
        // no CUDA at all, so it is linked as needed or not.
        if lib.join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-L{},-ltorch_cuda,--as-needed", lib.display());
        }
    }
}
