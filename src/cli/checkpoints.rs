//! `audit key`, `audit checkpoints --out FILE` and the checkpoint part of
//! `audit verify --key PUBKEY [--checkpoints FILE]`. The work is
//! `crate::audit::checkpoint`'s and `crate::audit::checkpoint_verify`'s;
//! this reads flags and prints.
//!
//! A public key is given in the signed-note verifier-key form,
//! `<name>+<key id>+<base64(0x01 || Ed25519 public key)>`, exactly as
//! `audit key` prints it: the name and id say which signature lines it
//! checks, and a key of the wrong name or id is refused before anything
//! is verified.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::lifecycle::VerifyArgs;
use crate::audit::checkpoint::CheckpointKey;
use crate::audit::checkpoint_verify::{self, CheckpointReport};
use crate::audit::signed_note::NoteVerifier;
use crate::config::Config;
use crate::store::{Store, checkpoints};

/// `audit checkpoints` flags.
#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// The file to write every stored checkpoint to (replaced if it
    /// exists), as signed notes one after another.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

fn open_store(config: &Config) -> Result<Store, ExitCode> {
    Store::open_ready(&config.database_url(), &config.store_options()).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

/// `audit key`: prints the checkpoint key's public verifier key.
pub fn key(config: &Config) -> ExitCode {
    match CheckpointKey::load(config) {
        Ok(k) => {
            println!("{}", k.verifier());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `audit checkpoints --out FILE`.
pub fn export(config: &Config, args: &CheckpointsArgs) -> ExitCode {
    let store = match open_store(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let rows = match store.read_blocking(checkpoints::all) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut tmp = args.out.clone().into_os_string();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let written = std::fs::write(&tmp, checkpoint_verify::export_text(&rows))
        .and_then(|()| std::fs::rename(&tmp, &args.out));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        eprintln!("error: cannot write `{}`: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    let span = match (rows.first(), rows.last()) {
        (Some(a), Some(b)) => format!(" (seq {}..{})", a.seq, b.seq),
        _ => String::new(),
    };
    println!(
        "exported {} checkpoints{span} to {}",
        rows.len(),
        args.out.display()
    );
    if let Ok(k) = CheckpointKey::load(config) {
        println!("verifier key: {}", k.verifier());
    }
    ExitCode::SUCCESS
}

/// `audit verify`: the chain (`lifecycle::verify`), then, with `--key`,
/// the signed checkpoints. Exit 1 when either finds a problem.
pub fn verify(config: &Config, args: &VerifyArgs) -> ExitCode {
    let keys = match parse_keys(&args.key) {
        Ok(k) => k,
        Err(code) => return code,
    };
    let chain = super::lifecycle::verify(config, args);
    if keys.is_empty() {
        return chain;
    }
    let signed = verify_checkpoints(config, args, &keys);
    if chain == ExitCode::SUCCESS {
        signed
    } else {
        chain
    }
}

fn parse_keys(texts: &[String]) -> Result<Vec<NoteVerifier>, ExitCode> {
    texts
        .iter()
        .map(|t| NoteVerifier::parse(t))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            eprintln!(
                "error: `--key`: {e} (expected `name+id+base64`, as `cedargate audit key` prints)"
            );
            ExitCode::from(2)
        })
}

fn verify_checkpoints(config: &Config, args: &VerifyArgs, keys: &[NoteVerifier]) -> ExitCode {
    let kept = match &args.checkpoints {
        None => Vec::new(),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => checkpoint_verify::parse_file(&text),
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
    };
    let store = match open_store(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match store.read_blocking(|c| checkpoint_verify::verify(c, keys, &kept)) {
        Ok(report) => print_report(&report),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_report(report: &CheckpointReport) -> ExitCode {
    if !report.problems.is_empty() {
        for p in &report.problems {
            eprintln!("tampered: {p}");
        }
        eprintln!(
            "checkpoint verification FAILED: {} problem(s) ({} checkpoints verified)",
            report.problems.len(),
            report.verified
        );
        return ExitCode::FAILURE;
    }
    let newest = report
        .newest
        .as_ref()
        .map(|(seq, at)| format!("; newest at seq {seq}, signed {at}"))
        .unwrap_or_default();
    println!(
        "checkpoints intact: {} signed checkpoints match the trail{newest}; {} anchor(s), each signed",
        report.verified, report.anchors
    );
    if report.uncovered > 0 {
        println!(
            "{} record(s) after the newest checkpoint are not covered by a signature yet",
            report.uncovered
        );
    }
    ExitCode::SUCCESS
}
