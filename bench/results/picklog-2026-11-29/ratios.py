import re,sys,statistics
d=sys.argv[1]; builds=sys.argv[2:]
data={}
for b in builds:
    r=0
    for line in open(f"{d}/{b}.txt"):
        if line.startswith("=== round"):
            r=int(line.split()[2])
        m=re.match(r"Benchmark\S+/(workers=\d+/op=\w+)-2\s+\d+\s+(.*)",line)
        if m:
            f=m.group(2).split()
            vals={f[i+1]:float(f[i]) for i in range(0,len(f)-1,2)}
            data.setdefault(m.group(1),{}).setdefault(b,{})[r]=vals
for k,v in data.items():
    base=builds[0]
    print(k)
    for b in builds:
        cpu=[v[b][r]["cpu-p50-ns"] for r in sorted(v[b])]
        print(f"  {b:4s} cpu-p50 median {statistics.median(cpu)/1000:7.1f}us  runs {[round(c/1000,1) for c in cpu]}  B/op {v[b][1]['B/op']:.0f} allocs {v[b][1]['allocs/op']:.0f}")
    for b in builds[1:]:
        rs=[v[b][r]["cpu-p50-ns"]/v[base][r]["cpu-p50-ns"] for r in sorted(v[b])]
        print(f"  {b}/{base} per-round {[round(x,3) for x in rs]} median {statistics.median(rs):.3f}")
