// Command-line arguments of the benchmark scripts: `--name value` pairs into out[name], the
// rest, in order, into out._.
export function args(argv) {
  const out = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) out[argv[i].slice(2)] = argv[++i];
    else out._.push(argv[i]);
  }
  return out;
}
