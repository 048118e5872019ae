import csv, statistics, sys
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10][1:]
seq=[(r[4].split("(")[0].replace("mlx::custom_kernel_int8nax_",""), float(r[14].replace(",",""))/1000) for r in rows]
shapes=[tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]
med=lambda v: statistics.median(v) if v else float('nan')
res={s:{"i8":[], "w8":[], "lt":[], "im":[], "ltname":None} for s in range(len(shapes))}
si=-1; mode=None; nmark=0
ours=("sm90_i32","sm90_w8a8","simt_","reduce_","quantize_")
for name,t in seq:
    if "floor_copy" in name:
        if nmark%6==0: si+=1
        mode="i8" if nmark%2==0 else "w8"; nmark+=1
        res[si][mode].append(0.0); continue
    if "CUDAFunctorOnSelf_add" in name:
        mode="torch"; res[si]["lt"].append([]); continue
    if mode in ("i8","w8"):
        if name.startswith(ours): res[si][mode][-1]+=t
    elif mode=="torch":
        if "FillFunctor" not in name and "at::" not in name: res[si]["lt"][-1].append((name,t))
print("| M, K, N | int8nax µs | TOPS | cuBLASLt µs | TOPS | int8nax vs cuBLASLt | torch._int_mm µs | W8A8 µs | W8A8 / raw | cuBLASLt kernel |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s,(m,k,n) in enumerate(shapes):
    r=res[s]; ops=2*m*n*k
    i8=med(r["i8"][1:]); w8=med(r["w8"][1:])
    runs=r["lt"]
    if m>16:
        lt=med([sum(t for _,t in x[:-1]) for x in runs]); im=med([x[-1][1] for x in runs])
        r["ltname"]=" + ".join(nm[:60] for nm,_ in runs[-1][:-1])
    else:
        lt=med([sum(t for _,t in x) for x in runs]); im=float("nan"); r["ltname"]=" + ".join(nm[:60] for nm,_ in runs[-1])
    print(f"| {m}, {k}, {n} | {i8:.1f} | {ops/i8/1e6:.0f} | {lt:.1f} | {ops/lt/1e6:.0f} | {lt/i8:.2f}x | {im:.1f} | {w8:.1f} | {w8/i8:.2f} | {r['ltname']} |")
