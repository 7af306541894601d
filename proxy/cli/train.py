"""``sonate train safety``: train the harmful-intent classifier of the Safety policy.

Example::

    sonate train safety --data-dir ../shared/data --out proxy/guardrails/artefacts
    sonate train privacy-rows --data-dir ../shared/data
    sonate train compliance-rows --data-dir ../shared/data

``safety`` writes the artefact's weights (.npz), metadata (.json) and the hashes of the rows it
was trained on (.rows.json, :mod:`proxy.evaluation.provenance`). ``privacy-rows`` records which
presidio rows the privacy policy's comments quote (the rows its patterns were tuned on) in
``proxy/guardrails/artefacts/privacy-tuning.rows.json``, and every development row read while the
privacy context rules were written (``privacy-context.rows.json``, :mod:`proxy.evaluation.training_privacy`).
``compliance-rows`` records the tuning rows the Compliance threshold was chosen on and its examples
were written from, with the threshold rule's out-of-fold figures (``domain-threshold.rows.json``,
:mod:`proxy.evaluation.training_compliance`).

The training itself is :func:`proxy.evaluation.training.train_harm_classifier`; this module holds
its options and prints the cross-validation summary. Exit codes: 0 written, 2 a data error (one
message, no traceback).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from proxy.cli.common import Subcommand, UsageError, int_at_least

HELP = "train a guardrail artefact from the development data"


def add_safety_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate train safety`` on ``parser``."""
    from proxy.evaluation.training import ARTEFACT_DIR, EXEMPLARS, FRAMED_COPIES

    parser.add_argument("--data-dir", type=Path, required=True, help="development data (layout of shared/data)")
    parser.add_argument("--out", type=Path, default=ARTEFACT_DIR, help=f"artefact directory (default {ARTEFACT_DIR})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--c", type=float, default=3.0, help="the RBF SVM's C (default 3.0)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-recall", type=float, default=0.98,
                        help="recall of AdvBench and XSTest unsafe rows for the threshold")
    parser.add_argument("--toxicity-threshold", type=float, default=0.90)
    parser.add_argument("--exemplars", type=Path, default=EXEMPLARS,
                        help=f"contrast exemplars always trained on (default {EXEMPLARS})")
    parser.add_argument("--no-exemplars", action="store_true", help="train without the exemplars")
    parser.add_argument("--framed-copies", type=int_at_least(0), default=FRAMED_COPIES,
                        help=f"copies of each trained row with a greeting / reference / sign-off around it "
                             f"(proxy/guardrails/framings.py; default {FRAMED_COPIES}, 0: none)")
    parser.add_argument("--no-pair-holdout", action="store_true",
                        help="skip the XSTest type-pair hold-out (most of the training time; same weights)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run_safety(args: argparse.Namespace) -> int:
    """Train from parsed arguments and print the CV summary. Returns 0; raises UsageError on a data error."""
    from proxy.evaluation.training import ARTEFACT_VERSION, DataError, summary, train_harm_classifier

    try:
        metadata = train_harm_classifier(args.data_dir, args.out, seed=args.seed, progress=not args.no_progress,
                                         c=args.c, folds=args.folds, repeats=args.repeats,
                                         target_recall=args.target_recall, toxicity_threshold=args.toxicity_threshold,
                                         exemplars=None if args.no_exemplars else args.exemplars,
                                         framed_copies=args.framed_copies, pair_holdout=not args.no_pair_holdout)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    print(summary(metadata))
    print(f"wrote {Path(args.out) / ARTEFACT_VERSION}.npz, .json and .rows.json")
    return 0


def add_privacy_rows_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate train privacy-rows`` on ``parser``."""
    from proxy.evaluation.training import PRIVACY_ROWS

    parser.add_argument("--data-dir", type=Path, required=True, help="development data with presidio/*.json")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="project directory holding the commented files (default: this checkout)")
    parser.add_argument("--out", type=Path, default=PRIVACY_ROWS, help=f"rows file (default {PRIVACY_ROWS})")


def run_privacy_rows(args: argparse.Namespace) -> int:
    """Write the privacy rows files (patterns' quoted rows, context rules' tuning rows). Returns 0."""
    from proxy.evaluation.training import SAFETY_PERSONAL_ROWS, DataError, privacy_tuning_rows, safety_personal_rows
    from proxy.evaluation.training_privacy import ROWS_PATH, privacy_context_rows

    try:
        document = privacy_tuning_rows(args.data_dir, args.root, args.out)
        privacy_context_rows(args.data_dir)
        personal = safety_personal_rows(args.data_dir)
    except (DataError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {args.out}: {len(document['quoted_rows'])} presidio rows quoted by the privacy comments")
    print(f"wrote {ROWS_PATH}: the development rows read while tuning the privacy context rules")
    print(f"wrote {SAFETY_PERSONAL_ROWS}: the {len(personal['rows']['presidio_read'])} presidio rows read while "
          "writing Safety's personal-data exemplars")
    return 0


def add_compliance_rows_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate train compliance-rows`` on ``parser``."""
    from proxy.evaluation.training_compliance import ORDINARY_WEIGHT, POLICY, ROWS_PATH

    parser.add_argument("--data-dir", type=Path, required=True, help="development data with truthfulqa/*.csv")
    parser.add_argument("--policy", type=Path, default=POLICY, help=f"compliance policy file (default {POLICY})")
    parser.add_argument("--out", type=Path, default=ROWS_PATH, help=f"rows file (default {ROWS_PATH})")
    parser.add_argument("--ordinary-weight", type=float, default=ORDINARY_WEIGHT,
                        help="weight of an ordinary row escalated against a regulated row missed in the "
                             f"threshold's cost (default {ORDINARY_WEIGHT:g})")


def run_compliance_rows(args: argparse.Namespace) -> int:
    """Write the Compliance rows file and print the threshold rule's out-of-fold figures. Returns 0."""
    from proxy.evaluation.training import DataError
    from proxy.evaluation.training_compliance import compliance_rows

    try:
        document = compliance_rows(args.data_dir, args.policy, args.out, args.ordinary_weight)
    except (DataError, OSError, ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from None
    summary = document["summary"]
    print(f"wrote {args.out}: {sum(len(v) for v in document['rows'].values())} tuning rows")
    print("thresholds chosen out of fold: " + " / ".join(f"{t:.2f}" for t in summary["thresholds"])
          + f"; on all tuning rows: {summary['recommended']:.2f}")
    for key, oof in document["out_of_fold"].items():
        print(f"  out of fold {key}: escalated {oof['k']}/{oof['n']} = {100 * oof['rate']:.1f}%")
    for key, (k, n) in summary["in_sample"].items():
        print(f"  in-sample at the policy's threshold {summary['policy_threshold']:.2f}, {key}: "
              f"{k}/{n} = {100 * k / n:.1f}%")
    return 0


def add_privacy_person_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate train privacy-person`` on ``parser``."""
    from proxy.evaluation.training_person import ARTEFACT

    parser.add_argument("--data-dir", type=Path, required=True, help="development data with presidio/*.json")
    parser.add_argument("--out", type=Path, default=ARTEFACT, help=f"artefact (default {ARTEFACT})")
    parser.add_argument("--c", type=float, default=0.1, help="the logistic regression's C (default 0.1)")
    parser.add_argument("--target-recall", type=float, default=0.97,
                        help="out-of-fold private recall the threshold keeps (default 0.97)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run_privacy_person(args: argparse.Namespace) -> int:
    """Train the person head and print its out-of-fold figures. Returns 0; UsageError on a data error."""
    from proxy.evaluation.training import DataError
    from proxy.evaluation.training_person import train_person_head

    try:
        metadata = train_person_head(args.data_dir, args.out, c=args.c, target_recall=args.target_recall,
                                     progress=not args.no_progress)
    except (DataError, OSError) as exc:
        raise UsageError(str(exc)) from None
    rows = metadata["rows"]
    print(f"wrote {args.out}: {rows['presidio']} presidio + {rows['written']} written mentions, "
          f"threshold {metadata['threshold']:.2f}")
    for key, p in metadata["out_of_fold"].items():
        print(f"  out of fold {key}: {p['k']}/{p['n']} = {100 * p['rate']:.1f}%")
    return 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "privacy-person": ("the private-or-public head of Privacy's PERSON mentions", add_privacy_person_arguments,
                       run_privacy_person),
    "safety": ("the harmful-intent classifier of the Safety policy", add_safety_arguments, run_safety),
    "privacy-rows": ("record the presidio rows the privacy patterns and rules were tuned on, and those read "
                     "for Safety's personal-data exemplars",
                     add_privacy_rows_arguments, run_privacy_rows),
    "compliance-rows": ("record the tuning rows the Compliance threshold was chosen on, with its "
                        "out-of-fold figures", add_compliance_rows_arguments, run_compliance_rows),
}
