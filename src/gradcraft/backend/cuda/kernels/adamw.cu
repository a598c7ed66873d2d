// AdamW over every parameter in one launch (PyTorch's torch.optim.AdamW update):
//   g = grad * grad_scale;  p -= lr * weight_decay * p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// lr and the step t are read from a device buffer `lr_step` = [lr, t] (float32), and grad_scale
// (the clipping coefficient, gradnorm.cu's out[1]) from a device pointer or NULL for 1: values that
// change every step stay out of the launch arguments, so a captured step can be replayed.
// Parameters and gradients may be float32, bfloat16 or float16; m and v are float32.
#include "multi_tensor.cuh"

extern "C" __global__ void adamw_step(const u64* params, const int* param_codes, const u64* grads,
                                      const int* grad_codes, const u64* exp_avg, const u64* exp_avg_sq,
                                      const i64* sizes, const int* chunk_tensor, const i64* chunk_start,
                                      int n_chunks, const float* lr_step, const float* grad_scale,
                                      float beta1, float beta2, float eps, float weight_decay) {
    const float lr = lr_step[0], t = lr_step[1];
    const float bc1 = 1.0f - powf(beta1, t), bc2_sqrt = sqrtf(1.0f - powf(beta2, t));
    const float gs = grad_scale ? grad_scale[0] : 1.0f;
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const i64 start = chunk_start[c], end = min(start + (i64)CHUNK, sizes[k]);
        void* p = (void*)params[k];
        const void* g = (const void*)grads[k];
        float* m = (float*)exp_avg[k];
        float* v = (float*)exp_avg_sq[k];
        const int pc = param_codes[k], gc = grad_codes[k];
        for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            float gv = load_any(g, gc, i) * gs;
            float pv = load_any(p, pc, i);
            pv -= lr * weight_decay * pv;
            float mv = beta1 * m[i] + (1.0f - beta1) * gv;
            float vv = beta2 * v[i] + (1.0f - beta2) * gv * gv;
            m[i] = mv;
            v[i] = vv;
            pv -= (lr / bc1) * mv / (sqrtf(vv) / bc2_sqrt + eps);
            store_any(p, pc, i, pv);
        }
    }
}
