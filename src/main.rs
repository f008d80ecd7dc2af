use std::process::ExitCode;

fn main() -> ExitCode {
    // kube (ring) and reqwest both link rustls: pick one provider up front.
    let _ = rustls::crypto::ring::default_provider().install_default();
    deletion_cost::cli::run()
}
