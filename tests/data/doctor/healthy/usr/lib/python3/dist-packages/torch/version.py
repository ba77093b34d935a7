__version__ = '2.3.1'
debug = False
cuda: Optional[str] = '12.1'
git_version = 'd44533f9d073df13895333e70b66f81c513c1889'
hip: Optional[str] = None
