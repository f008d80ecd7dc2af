use std::process::ExitCode;

// jemalloc returns freed pages to the OS by itself (see Cargo.toml)
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // kube and reqwest both link rustls: pick one provider up front.
    deletion_cost::prometheus::install_crypto_provider();
    deletion_cost::cli::run()
}
