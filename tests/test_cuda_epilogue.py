"""The W8A8 float32 epilogue of kernels/cuda_common.cuh, run on the CPU: its device functions
(FloatPair ... dequantize) are compiled as host C++ with the CUDA intrinsics mapped to IEEE
float operations (no contraction), and checked against long double on random, subnormal-s_x,
huge-s_x, cancelling-bias and non-finite inputs: within 1 float32 ulp of the exact value.
Skipped where no C++ compiler exists."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from int8nax.backends import cuda_source

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
  std::uniform_int_distribution<int> ai(-2147483647,2147483647), small(-300000,300000), e(-160,130);
  std::uniform_real_distribution<float> u(0.5f,1.0f);
  long exact=0, tot=0;
  for(int i=0;i<ITERATIONS;i++){
    int acc = (i%3==0)? ai(g) : (i%3==1? small(g) : (int)(g()%2000)-1000);
    int mode=i%5;
    float sx, sw, b;
    if(mode==0){ sx=u(g)*1e-2f; sw=u(g)*1e-3f; b=(u(g)-0.75f)*4; }
    else if(mode==1){ sx=ldexpf(u(g), e(g)); sw=ldexpf(u(g), e(g)/2); b=ldexpf(u(g)-0.75f, e(g)); }
    else if(mode==2){ sx=ldexpf(u(g), -140+(int)(g()%20)); sw=u(g); b=ldexpf(u(g),-149+(int)(g()%30)); }   // subnormal s_x
    else if(mode==3){ sx=ldexpf(u(g), 100+(int)(g()%27)); sw=ldexpf(u(g),-(int)(g()%40)); b=ldexpf(u(g)-0.75f,100+(int)(g()%28)); }  // huge
    else { sx=u(g)*1e-2f; sw=u(g)*1e-3f; double v=(double)acc*sx*sw; b=-(float)v; } // cancellation
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


def device_part() -> str:
    text = cuda_source._read("cuda_common.cuh")
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
