"""Table 1 and Figure 2 of the Hogwild NLP paper: the attention NMT model (Europarl fr->en) trained with 1, 2 (and
3, 4 when the devices exist) Hogwild workers for the same number of updates; time, training loss and held-out BLEU.

Writes <out>/nmt_table1.md and nmt_table1.csv (workers, minutes, train loss, held-out BLEU) and nmt_figure2.png
(loss and BLEU vs time and vs updates, one line per worker count). Defaults fit a 2-core CPU machine (small model,
6,000-word vocabularies, pairs of <= 30 words, 1 and 2 workers, 1,500 updates of 32 pairs each, BLEU on 200 held-out
sentences: 10 minutes in all on 2026-11-22); the paper's setting on a GPU box:
    python -m scripts.reproduce_nmt --gpus 4 --preset paper --vocab-size 15000 --max-len 50 --batch-size 64 \
        --updates 90000 --dev-limit 0 --eval-every 5000

Usage: python -m scripts.reproduce_nmt [--workers 2] [--updates 1500] [--out docs/results]
"""
from __future__ import annotations

import argparse
from pathlib import Path

PAPER = {1: (26.89, 68.44, 14.42), 2: (16.56, 64.53, 14.46), 3: (9.24, 64.11, 14.32), 4: (6.96, 64.26, 14.40)}
from hogwild.data.corpora import corpora_dir
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves

if __package__:  # python -m scripts.reproduce_nmt (the documented form)
    from .series import run_series, script_argv, script_entry, write_runs_json, write_table
else:  # python scripts/reproduce_nmt.py with the project installed: this folder is sys.path[0]
    from series import run_series, script_argv, script_entry, write_runs_json, write_table


def parse_args(argv=None) -> argparse.Namespace:
    europarl = corpora_dir() / "europarl-fr-en"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--train", default=str(europarl / "train"), help="training prefix (PREFIX.fr, PREFIX.en)")
    p.add_argument("--dev", default=str(europarl / "dev"), help="held-out prefix")
    p.add_argument("--src-lang", default="fr", help="source language suffix")
    p.add_argument("--tgt-lang", default="en", help="target language suffix")
    p.add_argument("--train-limit", type=int, default=0, help="first N training pairs only (0: all)")
    p.add_argument("--workers", type=int, default=2, help="Hogwild CPU worker counts 1..N")
    p.add_argument("--gpus", type=int, default=0, help="GPU counts 1..N instead of CPU workers")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="model sizes")
    p.add_argument("--vocab-size", type=int, default=6000, help="words per side (the paper: 15,000)")
    p.add_argument("--max-len", type=int, default=30, help="drop longer training pairs (the paper: 50)")
    p.add_argument("--updates", type=int, default=1500, help="updates per run, the same for every worker count")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per update (the paper: 64)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (the paper: 0.1, constant)")
    p.add_argument("--optimizer", default="sgd", help="shared optimizer (the paper: sgd)")
    p.add_argument("--dev-limit", type=int, default=200, help="held-out sentences for BLEU (0: all)")
    p.add_argument("--eval-every", type=int, default=250, help="updates between greedy BLEU evaluations")
    p.add_argument("--beam", type=int, default=5, help="beam of the final held-out translations")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--out", default="docs/results", help="where the tables and figure go")
    p.add_argument("--runs-dir", default="runs/reproduce_nmt", help="where the run directories go")
    p.add_argument("--reuse", action="store_true", help="read finished runs (summary.json) instead of training")
    args = p.parse_args(argv)
    for name in ("workers", "updates", "batch_size", "eval_every", "beam", "vocab_size", "max_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    common = dict(task="nmt", train=[args.train], dev=args.dev, src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                  train_limit=args.train_limit or None, vocab_size=args.vocab_size, max_len=args.max_len,
                  preset=args.preset, steps=args.updates,
                  batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr, clip_norm=1.0,
                  dev_limit=args.dev_limit or None, eval_every=args.eval_every, beam=args.beam, seed=args.seed)
    device = "GPU" if args.gpus else "worker"
    runs = [(f"{n} {device}{'s' if n > 1 else ''}", f"workers-{n}",
             RunOptions(**common, **({"gpus": n} if args.gpus else {"workers": n})))
            for n in range(1, (args.gpus or args.workers) + 1)]
    results = run_series(runs, args.runs_dir, command, args.reuse)
    out = Path(args.out)
    plot_curves([r.curves for r in results], out / "nmt_figure2.png",
                title=f"NMT {args.src_lang}->{args.tgt_lang}: {args.updates} updates per worker count", minutes=True)
    base = results[0].minutes
    rows = []
    for r in results:
        n = r.summary["workers"]
        heldout = (r.summary.get("heldout") or {}).get("dev", {})
        rows.append({"workers": n, "minutes": round(r.minutes, 2), "speedup": round(base / r.minutes, 2),
                     "updates": r.summary["updates"], "train loss": r.summary["final_train_loss"],
                     "held-out BLEU (greedy, best)": r.heldout(),
                     f"held-out BLEU (beam {args.beam})": heldout.get("bleu"),
                     "paper hours": PAPER.get(n, (None,))[0], "paper BLEU": PAPER.get(n, (None, None, None))[2]})
    columns = ["workers", "minutes", "speedup", "updates", "train loss", "held-out BLEU (greedy, best)",
               f"held-out BLEU (beam {args.beam})", "paper hours", "paper BLEU"]
    text = write_table(rows, columns, out / "nmt_table1.md", out / "nmt_table1.csv",
                       title="NMT: Table 1 of the Hogwild paper at CPU scale",
                       notes=[f"Train loss: mean per-token loss over the last logging interval (the paper reports "
                              f"a per-sentence cost, so the scales differ). Held-out BLEU: sacreBLEU on the first "
                              f"{args.dev_limit or 'all'} sentences of {Path(args.dev).name}; greedy = best periodic "
                              f"evaluation, beam = the best checkpoint at the end. Figure: nmt_figure2.png. "
                              f"Paper columns: 90,000 updates of the full model on 1.6M pairs, on GPUs."],
                       argv=command)
    write_runs_json(results, out / "nmt_table1.runs.json")
    print(text)
    return 0


if __name__ == "__main__":
    script_entry(main, __file__)
