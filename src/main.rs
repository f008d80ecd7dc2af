use std::process::ExitCode;

fn main() -> ExitCode {
    // kube and reqwest both link rustls: pick one provider up front.
    deletion_cost::prometheus::install_crypto_provider();
    deletion_cost::cli::run()
}
