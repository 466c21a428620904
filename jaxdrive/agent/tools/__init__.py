"""The driving tool library (paper appendix A.3): 20 core tools over a ``ToolContext`` built from a scene and its
annotations, each with a JSON schema; ``default_registry().call(ctx, name, args)`` returns an ``Observation``."""
from jaxdrive.agent.tools import driving, vision
from jaxdrive.agent.tools.context import Camera, ToolContext, default_rig
from jaxdrive.agent.tools.registry import Observation, Tool, ToolError, ToolRegistry, validate

CORE_TOOLS = vision.TOOLS + driving.TOOLS


def default_registry() -> ToolRegistry:
    """The 20 core tools."""
    return ToolRegistry(CORE_TOOLS)


__all__ = ["Camera", "CORE_TOOLS", "Observation", "Tool", "ToolContext", "ToolError", "ToolRegistry",
           "default_registry", "default_rig", "validate"]
