// Row-major GEMMs on cuBLASLt (column-major): C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T, so B is cuBLASLt's first operand and A its second,
// and a row-major [r, c] matrix with leading dimension ld is a column-major
// [c, r] one with the same ld.
#include <string>

#include "engine/core/status.h"
#include "kernels/cuda/gemm.h"

namespace ptdp::cuda {

namespace {

void check(cublasStatus_t s, const char *call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? Status::out_of_memory : Status::internal, "cuBLASLt ",
       call, " failed: ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ")");
}
void check(cudaError_t e, const char *call) {
  if (e == cudaSuccess) return;
  fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::internal, call,
       " failed: ", cudaGetErrorString(e));
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: fail(Status::invalid_argument, "GEMM dtype ", dtype_name(dt), " (allowed: f32, bf16, f16)");
  }
}

// Largest power of two up to 16 that divides the address: cuBLASLt's fastest
// kernels need 16-byte aligned operands, and the heuristic must know.
// With a batch, operand i starts stride_bytes further on, so that counts too.
int alignment(const void *p, int64_t stride_bytes) {
  const uintptr_t a = (uintptr_t)p | (uintptr_t)stride_bytes;
  int al = 16;
  while (al > 1 && a % al) al /= 2;
  return al;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A = our B, ...
  cublasLtMatmulAlgo_t algo{};
  bool usable = true;  // false: cuBLASLt has no algorithm for this epilogue
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

cublasLtEpilogue_t lt_epilogue(Gemm::Epilogue e) {
  switch (e) {
    case Gemm::Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Gemm::Epilogue::bias_gelu: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Gemm::Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case Gemm::Epilogue::bgrad: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Pointers of the given alignment for the heuristic, which reads their values
// for that alone (run_fused sets the real ones before each call).
void *aligned_to(int al) { return reinterpret_cast<void *>(uintptr_t(al) * 0x1000 + al); }

}  // namespace

// The epilogue's attributes: in row-major terms C's columns are cuBLASLt's
// rows, so the bias has N elements and aux is [M, N] with leading dimension N.
// bgrad: our A (op(A) = A^T, [M, K]) is cuBLASLt's second operand, whose
// columns (M) BGRADB sums over k into the bias pointer.
void Gemm::set_epilogue(Plan &p, Epilogue e, int N, int al_bias, int al_aux) {
  const cublasLtEpilogue_t lt = lt_epilogue(e);
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &lt, sizeof(lt)),
        "MatmulDescSetAttribute(EPILOGUE)");
  if (e != Epilogue::dgelu) {
    const void *bias = aligned_to(al_bias);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)), "MatmulDescSetAttribute(BIAS_POINTER)");
  }
  if (e == Epilogue::bias_gelu || e == Epilogue::dgelu) {
    const void *aux = aligned_to(al_aux);
    const int64_t ld = N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                         sizeof(aux)), "MatmulDescSetAttribute(AUX_POINTER)");
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                         sizeof(ld)), "MatmulDescSetAttribute(AUX_LD)");
  }
}

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
  if (workspace_bytes_) check(cudaMalloc(&workspace_, workspace_bytes_), "cudaMalloc (GEMM workspace)");
}

Gemm::~Gemm() {
  for (auto &kv : plans_) delete kv.second;
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Plan &Gemm::plan(const Key &key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [dti, dtc, ta, tb, M, N, K, lda, ldb, ldc, sA, sB, sC, batch, alA, alB, alC, ep,
              alBias, alAux] = key;
  const cudaDataType_t t = cuda_type((DType)dti), tc = cuda_type((DType)dtc);
  Plan *p = new Plan;
  try {
    check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our B
    const cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our A
    check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
          "MatmulDescSetAttribute(TRANSA)");
    check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
          "MatmulDescSetAttribute(TRANSB)");
    // Stored shapes, column-major: our B is [N, K] (or [K, N] transposed), A is [K, M]
    // (or [M, K]), C is [N, M].
    check(cublasLtMatrixLayoutCreate(&p->a, t, tb ? K : N, tb ? N : K, ldb), "LayoutCreate(B)");
    check(cublasLtMatrixLayoutCreate(&p->b, t, ta ? M : K, ta ? K : M, lda), "LayoutCreate(A)");
    check(cublasLtMatrixLayoutCreate(&p->c, tc, N, M, ldc), "LayoutCreate(C)");
    if (batch > 1) {
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {{p->a, sB}, {p->b, sA}, {p->c, sC}};
      for (auto [l, stride] : layouts) {
        check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                               sizeof(batch)), "LayoutSetAttribute(BATCH_COUNT)");
        check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof(stride)),
              "LayoutSetAttribute(STRIDED_BATCH_OFFSET)");
      }
    }
    if (ep >= 0) set_epilogue(*p, (Epilogue)ep, N, alBias, alAux);
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate");
    uint64_t ws = workspace_bytes_;
    uint32_t al[3] = {(uint32_t)alB, (uint32_t)alA, (uint32_t)alC};
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->c, p->c,
                                                            pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (ep >= 0 && (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && !found))) {
      p->usable = false;  // the caller composes the ops instead
      plans_[key] = p;
      return *p;
    }
    check(s, "MatmulAlgoGetHeuristic");
    if (!found)
      fail(Status::internal, "cuBLASLt has no algorithm for a ", dtype_name((DType)dti), " GEMM (C ",
           dtype_name((DType)dtc), ") M=", M, " N=", N, " K=", K, " batch=", batch);
    p->algo = result.algo;
  } catch (...) {
    delete p;
    throw;
  }
  plans_[key] = p;
  return *p;
}

void Gemm::run(DType ab, DType c, bool ta, bool tb, int M, int N, int K, float alpha, const void *A,
               int lda, int64_t strideA, const void *B, int ldb, int64_t strideB, float beta,
               void *C, int ldc, int64_t strideC, int batch, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || batch <= 0) return;  // nothing to write
  if (K <= 0) fail(Status::invalid_argument, "GEMM with K = ", K, " (must be >= 1)");
  if (ldc < N || lda < (ta ? M : K) || ldb < (tb ? K : N))
    fail(Status::invalid_argument, "GEMM leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc,
         " too small for M=", M, " N=", N, " K=", K);
  if (c != ab && c != DType::f32)
    fail(Status::invalid_argument, "GEMM of ", dtype_name(ab), " operands into ", dtype_name(c),
         " (C must be ", dtype_name(ab), " or f32)");
  if (batch == 1) strideA = strideB = strideC = 0;
  const int64_t size = (int64_t)dtype_size(ab), size_c = (int64_t)dtype_size(c);
  const Key key{(int)ab, (int)c, ta, tb, M, N, K, lda, ldb, ldc, strideA, strideB, strideC, batch,
                alignment(A, strideA * size), alignment(B, strideB * size),
                alignment(C, strideC * size_c), -1, 0, 0};
  Plan &p = plan(key);
  check(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                       workspace_, workspace_bytes_, stream),
        "Matmul");
}

bool Gemm::run_fused(Epilogue e, DType dt, bool tb, int M, int N, int K, const void *A, int lda,
                     const void *B, int ldb, void *C, const void *bias, const void *aux,
                     cudaStream_t stream) {
  if (e == Epilogue::bgrad) return false;  // run_bias_grad
  return fused(e, dt, dt, false, tb, M, N, K, A, lda, B, ldb, 0.f, C, N, bias, aux, stream);
}

bool Gemm::run_bias_grad(DType ab, int M, int N, int K, const void *A, int lda, const void *B,
                         int ldb, float *C, int ldc, float *dbias, cudaStream_t stream) {
  return fused(Epilogue::bgrad, ab, DType::f32, true, false, M, N, K, A, lda, B, ldb, 1.f, C, ldc,
               dbias, nullptr, stream);
}

bool Gemm::fused(Epilogue e, DType ab, DType c, bool ta, bool tb, int M, int N, int K,
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                 const void *bias, const void *aux, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || ab == DType::f32) return false;
  const bool has_aux = e == Epilogue::bias_gelu || e == Epilogue::dgelu;
  if (has_aux && (N % 8 || ldc != N)) return false;  // aux: [M, N], ld N, a multiple of 8
  if ((e != Epilogue::dgelu && !bias) || (has_aux && !aux)) return false;
  const Key key{(int)ab, (int)c, ta, tb, M, N, K, lda, ldb, ldc, 0, 0, 0, 1,
                alignment(A, 0), alignment(B, 0), alignment(C, 0), (int)e,
                bias ? alignment(bias, 0) : 0, aux ? alignment(aux, 0) : 0};
  Plan &p = plan(key);
  if (!p.usable) return false;
  if (e != Epilogue::dgelu)
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)), "MatmulDescSetAttribute(BIAS_POINTER)");
  if (has_aux)
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                         sizeof(aux)), "MatmulDescSetAttribute(AUX_POINTER)");
  const float alpha = 1.f;
  check(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                       workspace_, workspace_bytes_, stream),
        "Matmul (fused epilogue)");
  return true;
}

}  // namespace ptdp::cuda
