# Sourced by the run scripts here that compare two builds side by side.
# pair TAG POLICY ARGS...: runs `$old bench ARGS --policies POLICY` and the
# same with $new at the same time, into $out/TAG-old.txt and
# $out/TAG-new.txt, and appends to $out/log.txt the time and the load at
# the start, then each build's table rows and prediction-miss line.
pair() { tag=$1; pol=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" >> $out/log.txt
  $old bench "$@" --policies $pol > $out/$tag-old.txt 2>&1 &
  $new bench "$@" --policies $pol > $out/$tag-new.txt 2>&1 &
  wait
  for b in old new; do
    grep -E "^\s+(cache_aware|vllm_cache_aware)|prediction misses" $out/$tag-$b.txt | sed "s/^/$tag $b /" >> $out/log.txt
  done
}
