#pragma once
// erfc of a float on the GPU without CUDA's erfcf, which divides twice (two reciprocals on the special-function
// unit, with their corrections) and evaluates a degree-10 polynomial: about 51 PTX instructions besides loads and
// stores, 43 here, none on the special-function unit. gelu with erf, one erfc per element, ran at 1.29x its memory
// floor on an H200 through erfcf, where the tanh form (one expf) ran at 1.08x (docs/benchmarks/
// gpu-h200-2026-12-04.txt): the kernel is bound by instruction issue, not memory. The method is the CPU's
// AVX-512 erfc (kernels/cpu/vector_math.h, docs/vector_math.md), with the same intervals and coefficients:
//   a = |x|; erfc(a) = e^(-a^2) s(a), s(a) = erfc(a) e^(a^2) falling from 1 at 0 to 0.053 at 10.5;
//   s on one of 28 intervals, picked by the exponent and top three significand bits of a + 1 (1/8 wide on
//   [0, 1), 1/4 on [1, 3), 1/2 on [3, 7), 1 on [7, 11)), a degree-5 polynomial about the interval's centre
//   (scripts/vector-math-erfc-coefficients prints this table; each interval is two 16-byte loads);
//   e^(-a^2) from a^2 = high + low exactly (rounding a^2 would cost a^2 2^-24 relative: 100 ULP at a = 10),
//   as 2^n e^r, r = -high - n ln 2 - low in [-0.35, 0.35] and e^r a degree-7 polynomial;
//   x < 0: 2 - erfc(a), a clamped at 9 (where it is 2); x > 0 clamped at 10.1, where erfc rounds to 0.
// No branch and no division. Accuracy: within 2.96 ULP of erfc (every float in [0, 10.1] and its negative, against
// long double erfcl on the host, where the same operations round the same way); CUDA documents 4 for erfcf.
// Device code without includes: compiled by nvcc, embedded into the NVRTC prelude before device_math.cuh, and
// compiled for the host by the CUDA simulator.

namespace kiln::kernels::cuda::device_math {

struct alignas(16) ErfcRow {
  float value[4];
};
// {centre, c0, c1, c2} and {c3, c4, c5, 0}: s(centre + t) = c0 + c1 t + ... + c5 t^5.
struct ErfcInterval {
  ErfcRow first, second;
};

static __device__ const ErfcInterval kErfcIntervals[32] = {
    {{{0.0f, 1.0f, -1.12837911f, 0.999996603f}}, {{-0.752033949f, 0.495023906f, -0.253859043f, 0.0f}}},
    {{{0.1875f, 0.819181323f, -0.821186185f, 0.665208161f}}, {{-0.464305967f, 0.289580762f, -0.164289668f, 0.0f}}},
    {{{0.3125f, 0.726085961f, -0.674575448f, 0.515280664f}}, {{-0.342366487f, 0.204476789f, -0.111585617f, 0.0f}}},
    {{{0.4375f, 0.649193227f, -0.5603351f, 0.404046327f}}, {{-0.255709618f, 0.146306783f, -0.0768197626f, 0.0f}}},
    {{{0.5625f, 0.584998608f, -0.470255733f, 0.320479572f}}, {{-0.193323791f, 0.106015652f, -0.0535752065f, 0.0f}}},
    {{{0.6875f, 0.530870855f, -0.398431718f, 0.256948918f}}, {{-0.147852764f, 0.0777511224f, -0.037830811f, 0.0f}}},
    {{{0.8125f, 0.484810829f, -0.340561569f, 0.208104447f}}, {{-0.114317708f, 0.0576804094f, -0.0270326789f, 0.0f}}},
    {{{0.9375f, 0.44528228f, -0.293474913f, 0.170149475f}}, {{-0.0893064365f, 0.0432610624f, -0.0195376035f, 0.0f}}},
    {{{1.125f, 0.395698071f, -0.238058493f, 0.127881601f}}, {{-0.062793687f, 0.0287358575f, -0.0122835506f, 0.0f}}},
    {{{1.375f, 0.343295902f, -0.184315473f, 0.0898617655f}}, {{-0.0405032411f, 0.0171455052f, -0.00682649389f, 0.0f}}},
    {{{1.625f, 0.302261204f, -0.146030232f, 0.0649618804f}}, {{-0.0269778445f, 0.0105942171f, -0.0039373436f, 0.0f}}},
    {{{1.875f, 0.269429982f, -0.11801672f, 0.048148524f}}, {{-0.0184919927f, 0.00675638719f, -0.00234917109f, 0.0f}}},
    {{{2.125f, 0.242670357f, -0.0970301181f, 0.0364813022f}},
     {{-0.0130047929f, 0.00443369802f, -0.00144553569f, 0.0f}}},
    {{{2.375f, 0.2205057f, -0.080977127f, 0.0281849727f}}, {{-0.00935847498f, 0.00298564648f, -0.000914874894f, 0.0f}}},
    {{{2.625f, 0.201887548f, -0.068469502f, 0.02215508f}}, {{-0.00687490264f, 0.00205812557f, -0.000594075362f, 0.0f}}},
    {{{2.875f, 0.18605493f, -0.058563292f, 0.0176854543f}},
     {{-0.00514504407f, 0.00144917774f, -0.000394912728f, 0.0f}}},
    {{{3.25f, 0.166335344f, -0.047199402f, 0.0129371705f}},
     {{-0.00343544269f, 0.000891126634f, -0.000223606374f, 0.0f}}},
    {{{3.75f, 0.145589724f, -0.0364562571f, 0.00887870137f}},
     {{-0.00210727123f, 0.000490528299f, -0.000111080531f, 0.0f}}},
    {{{4.25f, 0.129345268f, -0.0289443322f, 0.00633184006f}},
     {{-0.00135592802f, 0.000285688962f, -5.88168332e-05f, 0.0f}}},
    {{{4.75f, 0.116302706f, -0.0235034488f, 0.00466131279f}},
     {{-0.000908096437f, 0.000174499743f, -3.28802271e-05f, 0.0f}}},
    {{{5.25f, 0.105612732f, -0.0194454454f, 0.00352414371f}},
     {{-0.00062910025f, 0.000110992885f, -1.92562638e-05f, 0.0f}}},
    {{{5.75f, 0.0966987759f, -0.0163432173f, 0.00272526965f}},
     {{-0.000448595063f, 7.3098905e-05f, -1.17398213e-05f, 0.0f}}},
    {{{6.25f, 0.0891566351f, -0.0139212701f, 0.00214869343f}},
     {{-0.000327946909f, 4.96154607e-05f, -7.41203712e-06f, 0.0f}}},
    {{{6.75f, 0.0826950595f, -0.0119959004f, 0.00172272604f}},
     {{-0.000244993105f, 3.45738845e-05f, -4.82526775e-06f, 0.0f}}},
    {{{7.5f, 0.0745736957f, -0.00977377128f, 0.00127039757f}},
     {{-0.000163798846f, 2.10796643e-05f, -2.67554378e-06f, 0.0f}}},
    {{{8.5f, 0.0659251213f, -0.00765208481f, 0.000882398279f}},
     {{-0.000101103018f, 1.15665607e-05f, -1.30874309e-06f, 0.0f}}},
    {{{9.5f, 0.0590646788f, -0.00615027826f, 0.000637031102f}},
     {{-6.5639324e-05f, 6.75501724e-06f, -6.88947409e-07f, 0.0f}}},
    {{{10.5f, 0.0534919016f, -0.00504927244f, 0.000474538101f}},
     {{-4.44059697e-05f, 4.15107388e-06f, -3.85161229e-07f, 0.0f}}},
    {{{0.0f, 0.0f, 0.0f, 0.0f}}, {{0.0f, 0.0f, 0.0f, 0.0f}}},
    {{{0.0f, 0.0f, 0.0f, 0.0f}}, {{0.0f, 0.0f, 0.0f, 0.0f}}},
    {{{0.0f, 0.0f, 0.0f, 0.0f}}, {{0.0f, 0.0f, 0.0f, 0.0f}}},
    {{{0.0f, 0.0f, 0.0f, 0.0f}}, {{0.0f, 0.0f, 0.0f, 0.0f}}},
};

__device__ __forceinline__ float erfc_float(float x) {
  const float a = fminf(fabsf(x), x < 0.0f ? 9.0f : 10.1f);  // NaN: any a (the result is x)
  const unsigned index = (__float_as_uint(a + 1.0f) >> 20) - (127u << 3);
  const ErfcRow first = kErfcIntervals[index].first, second = kErfcIntervals[index].second;
  const float t = a - first.value[0];
  float s = fmaf(second.value[2], t, second.value[1]);
  s = fmaf(s, t, second.value[0]);
  s = fmaf(s, t, first.value[3]);
  s = fmaf(s, t, first.value[2]);
  s = fmaf(s, t, first.value[1]);
  // e^(-a^2) = 2^n e^r; ln 2 = 0.693147182 - 1.90465421e-9, both parts applied by FMAs.
  const float high = a * a, low = fmaf(a, a, -high);
  const float n = rintf(high * -1.44269504f);
  float r = fmaf(n, -0.693147182f, -high);
  r = fmaf(n, 1.90465421e-9f, r) - low;
  float e = fmaf(0.000199075788f, r, 0.0013948587f);  // e^r on [-0.35, 0.35]: 0.035 * 2^-24 relative
  e = fmaf(e, r, 0.00833328348f);
  e = fmaf(e, r, 0.0416662171f);
  e = fmaf(e, r, 0.166666672f);
  e = fmaf(e, r, 0.5f);
  e = fmaf(e, r, 1.0f);
  e = fmaf(e, r, 1.0f);
  // 2^n in two factors: n reaches -147, where 2^n alone is no normal float. s e 2^(n + 64) is exact; the last
  // factor rounds once, into the subnormals where erfc is that small.
  const float tail = s * e * __int_as_float((static_cast<int>(n) + 64 + 127) << 23) * 0x1p-64f;
  const float result = x < 0.0f ? 2.0f - tail : tail;
  return x != x ? x : result;
}

}  // namespace kiln::kernels::cuda::device_math
