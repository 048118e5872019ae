"""The W8A8 epilogues of kernels/cuda/epilogue/dequantize.cuh, run on the CPU: their device functions
(FloatPair ... dequantize_narrow) are compiled as host C++ with the CUDA intrinsics mapped to IEEE
float operations (no contraction), and checked against long double on random, subnormal-s_x,
huge-s_x, cancelling-bias, typical-layer and non-finite inputs: the eft path within 1 float32 ulp
of the exact value; the narrow path (with the exact path where it reports `rare`), rounded to
float16 / bfloat16 as __float2half_rn / __float2bfloat16_rn do, within 1 ulp of that type of the
exact value rounded to it. Skipped where no C++ compiler exists."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from int8nax.backends.cuda import source as cuda_source

CXX = shutil.which("g++") or shutil.which("clang++")

PRELUDE = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <random>
#define __device__
#define __forceinline__ inline
#define __noinline__
using std::isinf; using std::isfinite;
static inline float __fmul_rn(float a,float b){volatile float r=a*b;return r;}
static inline float __fadd_rn(float a,float b){volatile float r=a+b;return r;}
static inline float __fsub_rn(float a,float b){volatile float r=a-b;return r;}
static inline float __fmaf_rn(float a,float b,float c){return std::fmaf(a,b,c);}
static inline float __int_as_float(int v){float f;memcpy(&f,&v,4);return f;}
struct __half {};          // only names: NarrowOutput's specialisations
struct __nv_bfloat16 {};
// Case i of the random inputs both host programs check: acc over the whole int32 range, within
// +-300000 or within +-1000; by i % 5 typical scales, exponents far apart, subnormal s_x, huge
// s_x, or a bias that cancels the product.
static void draw_case(std::mt19937_64& g, int i, int& acc, float& sx, float& sw, float& b){
  std::uniform_int_distribution<int> ai(-2147483647,2147483647), small(-300000,300000), e(-160,130);
  std::uniform_real_distribution<float> u(0.5f,1.0f);
  acc = (i%3==0)? ai(g) : (i%3==1? small(g) : (int)(g()%2000)-1000);
  int mode=i%5;
  if(mode==0){ sx=u(g)*1e-2f; sw=u(g)*1e-3f; b=(u(g)-0.75f)*4; }
  else if(mode==1){ sx=ldexpf(u(g), e(g)); sw=ldexpf(u(g), e(g)/2); b=ldexpf(u(g)-0.75f, e(g)); }
  else if(mode==2){ sx=ldexpf(u(g), -140+(int)(g()%20)); sw=u(g); b=ldexpf(u(g),-149+(int)(g()%30)); }
  else if(mode==3){ sx=ldexpf(u(g), 100+(int)(g()%27)); sw=ldexpf(u(g),-(int)(g()%40)); b=ldexpf(u(g)-0.75f,100+(int)(g()%28)); }
  else { sx=u(g)*1e-2f; sw=u(g)*1e-3f; double v=(double)acc*sx*sw; b=-(float)v; }
}
"""

MAIN = r"""// What the kernels do: the branch-free path, then dequantize where it reports `rare`.
long n_rare = 0;
static float eval(int acc, float sx, float sw, float b, bool hb){
  bool rare = false;
  float y = hb ? dequantize_fast<true>(acc,sx,sw,b,rare) : dequantize_fast<false>(acc,sx,sw,b,rare);
  if (rare) { n_rare++; y = hb? dequantize<true>(acc,sx,sw,b) : dequantize<false>(acc,sx,sw,b); }
  return y;
}
static double ulp32(double v){ double m=fabs(v); int e; if(m==0) return ldexp(1.0,-149); frexp(m,&e); e-=1; if(e<-126) e=-126; return ldexp(1.0,e-23);}
int bad=0; long n=0;
void chk(int acc,float sx,float sw,float b,bool hb){
  float y = eval(acc,sx,sw,b,hb);
  long double ex = (long double)acc*(long double)sx*(long double)sw + (hb?(long double)b:0.0L);
  double ref = (double)acc*(double)sx*(double)sw + (hb?(double)b:0.0);
  n++;
  if (std::isnan(ref)) { if(!std::isnan(y)){ if(bad++<20) printf("nan mismatch acc=%d sx=%a sw=%a b=%a y=%a\n",acc,sx,sw,b,y);} return; }
  float cr = (float)ex;  // correctly rounded (long double has 64 bits: near enough)
  if (std::isinf(cr) || std::isinf(y)) { if (cr!=y){ if(bad++<20) printf("inf mismatch acc=%d sx=%a sw=%a b=%a y=%a cr=%a\n",acc,sx,sw,b,y,cr);} return; }
  double err = fabs((double)y-(double)ex);
  double u = fmax(ulp32((double)ex), ulp32(y));
  if (err > u) { if(bad++<20) printf("err %.3g ulp acc=%d sx=%a sw=%a b=%a y=%a cr=%a\n",err/u,acc,sx,sw,b,y,cr);}
  // also: equals the correct rounding in all but rare cases
}
int main(){
  std::mt19937_64 g(1);
  std::uniform_real_distribution<float> u(0.5f,1.0f);
  long exact=0, tot=0;
  for(int i=0;i<ITERATIONS;i++){
    int acc; float sx, sw, b;
    draw_case(g, i, acc, sx, sw, b);
    bool hb = (i&1);
    chk(acc,sx,sw,b,hb);
    float y = eval(acc,sx,sw,b,hb);
    long double ex=(long double)acc*sx*sw+(hb?(long double)b:0.0L);
    tot++; exact += (y==(float)ex);
  }
  // specials
  float sp[]={0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3.4e38f, 1.0f};
  for(float a: sp) for(float c: sp) for(float d: sp) for(int acc: {0,1,-1,2147483647,-2147483647-1}) { chk(acc,a,c,d,true); chk(acc,a,c,d,false);}  
  // The fast path alone must agree with dequantize wherever it does not report `rare`.
  long fast_mismatch = 0;
  for(int i=0;i<200000;i++){
    int acc=(int)(g()%4000001)-2000000; float sx=u(g)*1e-2f, sw=u(g)*1e-3f, b=(u(g)-0.75f)*4;
    bool rare=false; float f=dequantize_fast<true>(acc,sx,sw,b,rare);
    if(!rare && f!=dequantize<true>(acc,sx,sw,b)) fast_mismatch++;
  }
  printf("fast path differs from dequantize in %ld non-rare cases\n", fast_mismatch);
  printf("checked %ld, %d beyond 1 ulp; correctly rounded %.6f; rare path %ld\n", n, bad, (double)exact/tot, n_rare);
}
"""


MAIN_NARROW = r"""// The narrow path as the kernels run it: dequantize_narrow, then dequantize where it reports
// `rare`, then the rounding to the output type.
struct Fmt { int p; int emin; int emax; };   // significant bits, normal exponent range
static const Fmt HALF{11, -14, 15}, BF16{8, -126, 127};
static double round_fmt(double v, const Fmt& f){   // round to nearest even, overflow to inf
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e = std::ilogb(v); if (e < f.emin) e = f.emin;
  double q = ldexp(1.0, e - (f.p - 1));
  double r = std::nearbyint(v / q) * q;
  double maxv = ldexp(2.0 - ldexp(1.0, 1 - f.p), f.emax);
  return fabs(r) > maxv ? (v > 0 ? INFINITY : -INFINITY) : r;
}
static double ulp_fmt(double v, const Fmt& f){
  int e = (v == 0 || std::isinf(v)) ? f.emin : std::ilogb(v); if (e < f.emin) e = f.emin;
  return ldexp(1.0, e - (f.p - 1));
}
long n_rare = 0, n_eft_rare = 0, n = 0, n_same = 0, n_neighbour_inf = 0; int bad = 0;
template <typename T, bool HB> static float run(int acc, float sx, float sw, float b){
  bool rare = false;
  float y = dequantize_narrow<T, HB>(acc, sx, sw, b, rare);
  if (rare) { n_rare++; y = dequantize<HB>(acc, sx, sw, b); }
  return y;
}
template <typename T> static void chk(const Fmt& f, int acc, float sx, float sw, float b, bool hb){
  float y = hb ? run<T, true>(acc, sx, sw, b) : run<T, false>(acc, sx, sw, b);
  bool er = false;
  float ye = hb ? dequantize_fast<true>(acc, sx, sw, b, er) : dequantize_fast<false>(acc, sx, sw, b, er);
  if (er) { n_eft_rare++; ye = hb ? dequantize<true>(acc, sx, sw, b) : dequantize<false>(acc, sx, sw, b); }
  double out = round_fmt((double)y, f);
  long double ex = (long double)acc * (long double)sx * (long double)sw + (hb ? (long double)b : 0.0L);
  double model = round_fmt((double)ex, f);
  n++;
  n_same += (out == round_fmt((double)ye, f)) || (std::isnan(out) && std::isnan(ye));
  if (std::isnan(model) || std::isnan(out)) {
    if (std::isnan(model) != std::isnan(out) && bad++ < 20) printf("nan mismatch p=%d acc=%d sx=%a sw=%a b=%a y=%a\n", f.p, acc, sx, sw, b, y);
    return;
  }
  if (std::isinf(model) || std::isinf(out)) {
    // inf is the neighbour of the largest finite value: float32's own rounding of a value a
    // hair below the type's overflow threshold (65520 for float16) can land on the threshold,
    // which rounds to inf (the eft path does the same).
    const double maxv = ldexp(2.0 - ldexp(1.0, 1 - f.p), f.emax);
    const bool neighbours = (std::isinf(model) ? fabs(out) == maxv : fabs(model) == maxv) && (out > 0) == (model > 0);
    if (model != out && !neighbours && bad++ < 20) printf("inf mismatch p=%d acc=%d sx=%a sw=%a b=%a y=%a model=%a\n", f.p, acc, sx, sw, b, y, model);
    n_neighbour_inf += model != out && neighbours;
    return;
  }
  double u = fmax(ulp_fmt(model, f), ulp_fmt(out, f));
  if (fabs(out - model) > u && bad++ < 20)
    printf("%.3g ulp p=%d acc=%d sx=%a sw=%a b=%a y=%a model=%a\n", fabs(out - model) / u, f.p, acc, sx, sw, b, y, model);
}
static void both(int acc, float sx, float sw, float b, bool hb){
  chk<__half>(HALF, acc, sx, sw, b, hb);
  chk<__nv_bfloat16>(BF16, acc, sx, sw, b, hb);
}
int main(){
  std::mt19937_64 g(7);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  for (int i = 0; i < ITERATIONS; i++){
    int acc; float sx, sw, b;
    draw_case(g, i, acc, sx, sw, b);
    both(acc, sx, sw, b, i & 1);
  }
  // Around float16's largest value and the overflow threshold (65520), with and without a bias.
  for (int i = 0; i < 20000; i++){
    float sx = 1.0f / 128, sw = ldexpf(u(g), -5);
    int acc = (int)(65536.0 * 4096 / ((double)sx * 4096 * sw)) / 4096 + (int)(g() % 2001) - 1000;
    both(acc, sx, sw, 0.0f, false);
    both(acc, sx, sw, (float)(g() % 64) - 32.0f, true);
  }
  float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3.4e38f, 1.0f, 65504.0f, -65520.0f};
  for (float a : sp) for (float c : sp) for (float d : sp) for (int acc : {0, 1, -1, 2147483647, -2147483647 - 1}) {
    both(acc, a, c, d, true); both(acc, a, c, d, false);
  }
  printf("checked %ld, %d beyond 1 ulp; rare %ld; same as the eft path %ld; inf next to the largest finite %ld\n",
         n, bad, n_rare, n_same, n_neighbour_inf);
  // A typical layer (codes up to 127, K ~ 4096, scales ~ max|x| / 127 and max|w| / 127, a bias
  // of the outputs' size): how often each path sends a value to the exact path.
  n_rare = n_eft_rare = n = n_same = 0;
  std::normal_distribution<double> acc_d(0.0, 6e4);
  for (int i = 0; i < TYPICAL; i++){
    int acc = (int)acc_d(g);
    float sx = u(g) * 8e-3f, sw = u(g) * 8e-4f, b = (u(g) - 0.75f) * 2;
    both(acc, sx, sw, b, true);
  }
  printf("typical %ld: narrow rare %ld, eft rare %ld, %d beyond 1 ulp\n", n, n_rare, n_eft_rare, bad);
}
"""


def device_part() -> str:
    text = cuda_source._read("epilogue/dequantize.cuh")
    return text[text.index("struct FloatPair {"):text.index("__device__ __forceinline__ void store_rounded(float* p")]


@pytest.mark.skipif(CXX is None, reason="no C++ compiler here")
def test_epilogue_is_within_one_ulp_on_the_host(tmp_path):
    src = tmp_path / "epilogue.cpp"
    src.write_text(PRELUDE + device_part() + MAIN.replace("ITERATIONS", "300000"))
    exe = tmp_path / "epilogue"
    subprocess.run([CXX, "-O1", "-ffp-contract=off", "-std=c++17", str(src), "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=120).stdout
    assert out.splitlines()[-1].startswith("checked ") and " 0 beyond 1 ulp" in out, out[-3000:]
    assert "differs from dequantize in 0 non-rare" in out, out[-3000:]


@pytest.mark.skipif(CXX is None, reason="no C++ compiler here")
def test_narrow_epilogue_is_within_one_ulp_of_float16_and_bfloat16_on_the_host(tmp_path):
    src = tmp_path / "narrow.cpp"
    src.write_text(PRELUDE + device_part() + MAIN_NARROW.replace("ITERATIONS", "300000").replace("TYPICAL", "200000"))
    exe = tmp_path / "narrow"
    subprocess.run([CXX, "-O1", "-ffp-contract=off", "-std=c++17", str(src), "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=120).stdout
    checked, typical = out.splitlines()[-2:]
    assert checked.startswith("checked ") and " 0 beyond 1 ulp" in checked, out[-3000:]
    # Every value of a typical biased layer on the branch-free path (the eft path's cancellation
    # test sends a fraction of a percent of them, and with them their warp, to the exact path).
    counts = typical.split()
    assert counts[0] == "typical" and counts[3] == "rare" and counts[4] == "0," and counts[-4] == "0", out[-3000:]
