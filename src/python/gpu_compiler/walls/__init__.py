"""The OS sandbox's two walls: Linux namespaces (``namespace``) and Landlock (``landlock``).

``gpu_compiler.confine`` puts them up, in that order, before a compile reads its kernel.
"""
