//! The `cedargate` binary: a thin shell over [`cedargate::cli`].

fn main() -> std::process::ExitCode {
    cedargate::cli::main()
}
