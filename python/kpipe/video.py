"""Frames of a video file as DLPack tensors, by index and by time.

    r = kpipe.VideoReader("clip.mp4", device="cuda", format="rgb", dtype="f16")
    len(r), r.fps, r.width, r.height, r.codec
    x = torch.from_dlpack(r[10])          # [3, H, W], on the device it decoded on
    b = torch.from_dlpack(r[0:64:8])      # a batch: [8, 3, H, W]
    y = r.at(2.5)                         # the frame shown 2.5 s in

Decoding is the library's video reader (NVDEC on cuda where the codec
allows, libavcodec otherwise); a frame asked for out of order is reached
by seeking to the key frame before it and decoding forward, and equals
sequential decode byte for byte (kp_video_reader_seek).
"""
import ctypes
from ctypes import byref, c_bool, c_int64, c_void_p

from ._core import Array, Bound, Handle, any_thread, device as _device
from ._lib import (DTYPES, Error, VideoFrame, VideoReaderConfig, VideoReaderInfo, check, lib)

_FORMATS = {"rgb": "f32", "nv12": "u8", "p016": "u16"}  # each format's own dtype
_DECODERS = {"auto": 0, "nvdec": 1, "software": 2}
_MATRICES = {1: "bt601", 2: "bt709", 3: "bt2020"}  # KP_VIDEO_MATRIX_*
_NV12, _P016 = 2, 3  # kp_pixel_format


class _Memory:
    """Device memory of one frame or batch, freed when its last Array goes."""

    def __init__(self, dev, nbytes):
        p = c_void_p()
        check(lib.kp_malloc(dev.ptr, max(int(nbytes), 1), byref(p)))
        devp = dev.ptr
        self._h = Handle(p.value, lambda q: lib.kp_free(devp, q), dev._h)
        self.ptr = p.value


class VideoReader(Bound):
    """A video file's frames, by index (`r[i]`, `r[i:j:k]`, `r.frames([..])`)
    and by time (`r.at(seconds)`), each a kpipe.Array (DLPack) on the
    device that decoded it:

    - format "nv12": u8 [H*3/2, W], the decoder's NV12 (Y rows, then
      interleaved U,V rows); a stream of more than 8 bits rounded to 8;
    - format "p016": u16 [H*3/2, W], the same layout of 16-bit samples,
      for streams of more than 8 bits (HEVC Main10: a 10-bit value v is
      v << 6), decoded in software;
    - format "rgb": [3, H, W] planar RGB in [0, 1], dtype "f32" (the
      default) or "f16", from either depth (a 10-bit stream keeps its
      precision), converted on the device (the `nv12_rgb` or `p016_rgb`
      module) with the matrix and range of `color`.

    A batch is one Array [N, ...]. Every frame or batch is new memory of
    its own: it stays valid however the reader is used after.

    Metadata: len(r) (exact: the first use scans the file's packets once),
    fps, duration (seconds), width, height, codec, decoder, pixel_format
    ("nv12" or "p016"), bits (of a sample in the stream: 8, 10, 12), and
    color: the RGB conversion's {"matrix": "bt601" | "bt709" | "bt2020",
    "range": "limited" | "full"} (the stream's range, and the matrix its
    colour space names; where it names none, BT.709 from 720 rows up and
    BT.601 below; `matrix=` overrides it).

    Threads: any thread may call it; calls take turns (each holds the
    reader while it decodes), and what they return is their own.
    """
    _what = "kpipe.VideoReader"

    def __init__(self, path, device="cpu", format="rgb", dtype=None, decoder="auto",
                 matrix=None):
        self._bind_init()
        if format not in _FORMATS:
            raise Error("KP_ERR_INVALID_ARG", "format %r: rgb, nv12 or p016" % (format,))
        if dtype is None:  # each format's own: u8 NV12, u16 P016, f32 RGB
            dtype = _FORMATS[format]
        if format != "rgb" and dtype != _FORMATS[format]:
            raise Error("KP_ERR_INVALID_ARG", "%s frames are %s, not %r"
                        % (format, _FORMATS[format], dtype))
        if format == "rgb" and dtype not in ("f32", "f16"):
            raise Error("KP_ERR_UNSUPPORTED", "rgb frames are f32 or f16, not %r" % (dtype,))
        if decoder not in _DECODERS:
            raise Error("KP_ERR_INVALID_ARG", "decoder %r: auto, nvdec or software" % (decoder,))
        if matrix not in (None, "bt601", "bt709", "bt2020"):
            raise Error("KP_ERR_UNSUPPORTED", "matrix %r: bt601, bt709 or bt2020" % (matrix,))
        if not lib.kp_video_built():
            raise Error("KP_ERR_UNSUPPORTED", "this kpipe was built without video files (FFmpeg)")
        self.device = _device(device)
        self.format, self.dtype, self.path = format, dtype, str(path)
        r = self._open(_DECODERS[decoder], _P016 if format == "p016" else _NV12)
        info = VideoReaderInfo()
        if r is not None:
            check(lib.kp_video_reader_get_info(r, byref(info)))
        if r is not None and format == "rgb" and info.depth > 8:
            # RGB from the 16-bit samples, not from NV12 rounded to 8 bits
            lib.kp_video_reader_close(r)
            r = self._open(_DECODERS[decoder], _P016)
            check(lib.kp_video_reader_get_info(r, byref(info)))
        if r is None:  # p016 asked for an 8-bit stream
            raise Error("KP_ERR_UNSUPPORTED", "%s: its samples are 8-bit: format='nv12' gives "
                        "them as they are, or format='rgb' (%s)" % (self.path, self._first.detail))
        self._h = Handle(r, lib.kp_video_reader_close, self.device._h)
        self._info = info
        self._deep = info.format == _P016
        self.width, self.height, self._pitch = info.width, info.height, info.pitch
        if self._pitch != self.width * (2 if self._deep else 1):  # opened at the width: packed
            self._h = Handle(None, None)
            raise Error("KP_ERR_INTERNAL", "%s: rows of %d bytes for a width of %d"
                        % (self.path, self._pitch, self.width))
        self.codec = info.codec.decode()
        self.decoder = info.decoder.decode()
        self.pixel_format = "p016" if self._deep else "nv12"
        self.bits = info.depth
        self._stream = self.device.stream()
        self._frame = VideoFrame()
        self._scratch = _Memory(self.device, info.frame_bytes) if format == "rgb" else None
        self._rgb = None
        self._next = 0          # the index the next decode gives
        self._matrix = matrix
        self._full = None       # the stream's range, known from its first frame
        self._said = None       # the matrix its frames say, known from the first too
        self._n = None

    def _open(self, decoder, fmt):
        """The reader's handle with frames as `fmt`; None where the stream's
        depth is not that format's (the first such error kept)."""
        cfg = VideoReaderConfig()
        cfg.decoder = decoder
        cfg.format = fmt
        r = c_void_p()
        try:
            check(lib.kp_video_reader_open(self.device.ptr, self.path.encode(), byref(cfg),
                                           byref(r)))
        except Error as e:
            if e.status != "KP_ERR_UNSUPPORTED" or "was asked for" not in str(e):
                raise
            self._first = e
            return None
        return r.value

    def _label(self):
        return "kpipe.VideoReader %r" % self.path

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "%s is closed" % self._label())
        return self._h.ptr

    # --- metadata ------------------------------------------------------------------
    def _count(self):  # with the reader held
        if self._n is None:
            n = c_int64()
            check(lib.kp_video_reader_count(self.ptr, byref(n)))
            self._n = n.value
        return self._n

    @any_thread
    def __len__(self):
        return self._count()

    @property
    def fps(self):
        n, d = self._info.rate[0], self._info.rate[1]
        return n / d if n > 0 and d > 0 else None

    @property
    def duration(self):
        return len(self) / self.fps if self.fps else None

    def _matrix_used(self):
        """The one given, else the stream's own, else BT.709 from 720 rows up
        and BT.601 below (what players assume of a stream that says none)."""
        return (self._matrix or self._said
                or ("bt709" if self.height >= 720 else "bt601"))

    @property
    def color(self):
        if self._full is None:
            self._single(0)  # the range and the matrix are the first frame's
        return {"matrix": self._matrix_used(), "range": "full" if self._full else "limited"}

    # --- frames --------------------------------------------------------------------
    def _index(self, i):  # with the reader held
        n = self._count()
        if isinstance(i, bool) or not isinstance(i, int):
            raise Error("KP_ERR_INVALID_ARG", "a frame index is an int, not a %s"
                        % type(i).__name__)
        j = i + n if i < 0 else i
        if j < 0 or j >= n:
            raise Error("KP_ERR_INVALID_ARG", "frame %d is out of range: %s has %d frames "
                        "(0 .. %d)" % (i, self.path, n, n - 1))
        return j

    def _shape(self):
        if self.format != "rgb":
            return [self.height * 3 // 2, self.width], self.dtype
        return [3, self.height, self.width], self.dtype

    def _decode(self, i, dst):
        """Frame i's NV12 or P016 into dst (device memory of frame_bytes)."""
        if i != self._next:
            check(lib.kp_video_reader_seek(self.ptr, i))
        eos = c_bool()
        check(lib.kp_video_reader_next(self.ptr, self._stream.ptr, dst, self._info.frame_bytes,
                                       byref(self._frame), byref(eos)))
        if eos.value:
            raise Error("KP_ERR_PARSE", "%s ended before frame %d" % (self.path, i))
        if self._frame.width != self.width or self._frame.height != self.height:
            raise Error("KP_ERR_UNSUPPORTED", "%s: frame %d is %dx%d, the first %dx%d: the "
                        "reader takes one size" % (self.path, i, self._frame.width,
                                                   self._frame.height, self.width, self.height))
        self._full = bool(self._frame.full_range)
        self._said = _MATRICES.get(self._frame.matrix)
        self._next = i + 1

    def _to_rgb(self, dst):
        """The scratch NV12 or P016 frame as planar RGB into dst, on the reader's stream."""
        if self._rgb is None:
            from .pipeline import Pipeline
            matrix = self._matrix_used()
            params = {"width": self.width, "height": self.height, "pitch": self._pitch,
                      "dtype": self.dtype, "matrix": matrix,
                      "range": "full" if self._full else "limited"}
            self._rgb = Pipeline({"kpipe_spec": 1, "name": "video_reader_rgb",
                                  "execution": "stream",
                                  "modules": [{"type": "p016_rgb" if self._deep else "nv12_rgb",
                                               "id": "rgb",
                                               "params": params}]}, device=self.device)
        rows = self.height * 3 // 2
        src = Array(self._scratch.ptr, "u8", [rows, self._pitch], [self._pitch, 1], self.device,
                    self._stream, self._scratch)
        out = self._rgb({"input": src}, stream=self._stream)["output"]
        check(lib.kp_memcpy_async(self._stream.ptr, dst, out.ptr, out.nbytes))
        self._rgb.release_thread()

    def _one(self, i, dst):
        if self.format != "rgb":  # the rows packed: the frame is the decoder's
            self._decode(i, dst)
            return
        self._decode(i, self._scratch.ptr if self.format == "rgb" else dst)
        if self.format == "rgb":
            self._to_rgb(dst)

    @any_thread
    def frames(self, indices):
        """Frames `indices` (ints; negative count from the end) as one Array
        [N, ...]: in the order given, each decoded once its turn comes."""
        idx = [self._index(int(i)) for i in indices]
        shape, dtype = self._shape()
        one = DTYPES[dtype][1]
        for d in shape:
            one *= d
        mem = _Memory(self.device, one * max(len(idx), 1))
        for k, i in enumerate(idx):
            self._one(i, mem.ptr + k * one)
        full = [len(idx)] + shape
        strides, acc = [0] * len(full), 1
        for d in range(len(full) - 1, -1, -1):
            strides[d] = acc
            acc *= full[d]
        return Array(mem.ptr, dtype, full, strides, self.device, self._stream, mem)

    @any_thread
    def _single(self, i):
        return self._single_held(self._index(i))

    def _single_held(self, i):
        shape, dtype = self._shape()
        one = DTYPES[dtype][1]
        for d in shape:
            one *= d
        mem = _Memory(self.device, one)
        self._one(i, mem.ptr)
        strides, acc = [0] * len(shape), 1
        for d in range(len(shape) - 1, -1, -1):
            strides[d] = acc
            acc *= shape[d]
        return Array(mem.ptr, dtype, shape, strides, self.device, self._stream, mem)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.frames(range(*key.indices(len(self))))
        return self._single(key)

    def at(self, seconds):
        """The frame shown `seconds` after the first."""
        k = c_int64()
        self._enter(bind=False)
        try:
            check(lib.kp_video_reader_frame_at(self.ptr, float(seconds), byref(k)))
        finally:
            self._leave()
        return self[k.value]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @any_thread
    def close(self):
        if self._h.ptr:
            self._stream.sync()
            if self._rgb is not None:
                self._rgb.close()
            self._h = Handle(None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "kpipe.VideoReader(%r, %dx%d %s, %s on %s)" % (
            self.path, self.width, self.height, self.codec, self.format, self.device.name)


__all__ = ["VideoReader"]
