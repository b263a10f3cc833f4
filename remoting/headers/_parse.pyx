# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of the parsers `ExtHeader._parser` generates: the same fields in the
same order, the same values, the same `HeaderError`s. A number made only of ASCII digits
(and a leading minus) is read in C; any other text goes to Python's `int`, as in the
reference, so whitespace, underscores and other digits behave exactly alike."""

from rmqpy.remoting.headers._numbers cimport ascii_integer

from rmqpy.remoting.headers import HeaderError

cdef enum Kind:
    TEXT = 0
    NUMBER = 1
    FLAG = 2


cdef class Field:
    cdef object key
    cdef object setter
    cdef object default
    cdef bint required
    cdef int kind
    cdef long long low, high  # a number's range: [low, high]
    cdef str null, not_a_number, too_wide

    def __init__(self, key, setter, default, bint required, int kind, long long low,
                 long long high, str head, str width):
        self.key = key
        self.setter = setter
        self.default = default
        self.required = required
        self.kind = kind
        self.low = low
        self.high = high
        self.null = head + " is null"
        self.not_a_number = head + " is not a number: "
        self.too_wide = f"{head} does not fit a Java {width}: "


cdef class Parser:
    """`parse(ext)` for one header class and naming."""
    cdef object cls
    cdef object new
    cdef list fields

    def __init__(self, cls, list fields):
        self.cls = cls
        self.new = object.__new__
        self.fields = fields

    def __call__(self, ext):
        get = ext.get
        header = self.new(self.cls)
        cdef Field f
        for f in self.fields:
            raw = get(f.key)
            if raw is None:
                if f.required:
                    raise HeaderError(f.null)
                f.setter(header, f.default)
            elif f.kind == TEXT:
                f.setter(header, raw)
            elif f.kind == FLAG:
                f.setter(header, raw.strip().lower() == "true")
            else:
                f.setter(header, _number(f, raw))
        return header


cdef object _number(Field f, object raw):
    cdef long long value
    if type(raw) is str and ascii_integer(<str>raw, &value):
        if not f.low <= value <= f.high:
            raise HeaderError(f.too_wide + repr(raw))
        return value
    try:
        number = int(raw)
    except ValueError:
        raise HeaderError(f.not_a_number + repr(raw)) from None
    if not f.low <= number <= f.high:
        raise HeaderError(f.too_wide + repr(raw))
    return number
