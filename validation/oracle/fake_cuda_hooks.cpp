// fake_cuda_hooks.cpp: what a CPU-only PyTorch lacks to run autograd over fake CUDA tensors
// (validation/oracle/capture.py preloads it; it is built there with the wheel's headers).
//  - a CUDA device guard whose streams and events do nothing: the wheel registers none, so
//    every op taking a device guard on a CUDA tensor (copy_, random fills) fails;
//  - CUDA hooks that say CUDA is built: the autograd engine keys each node's stream on
//    at::getAccelerator(), which is CUDA only when getCUDAHooks().isBuilt(); without it
//    backward stops at InputBuffer::add ("Cannot access accelerator device").
// Nothing here allocates, computes or synchronises: the fake tensors carry no data.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
namespace {
struct FakeCUDAGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::CUDA, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, getDevice()); }
  c10::Stream getNewStream(c10::Device, int = 0) const override { return c10::Stream(c10::Stream::DEFAULT, getDevice()); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, getDevice()); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};
}
C10_REGISTER_GUARD_IMPL(CUDA, FakeCUDAGuard);
namespace at {
namespace {
// the registry's key is the class name: getCUDAHooks() asks for "CUDAHooks"
struct CUDAHooks : CUDAHooksInterface {
  CUDAHooks(CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
};
}
REGISTER_CUDA_HOOKS(CUDAHooks);
}
