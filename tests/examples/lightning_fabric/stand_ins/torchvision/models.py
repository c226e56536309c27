"""Names torchmetrics imports from torchvision when it finds the package; never called by the examples."""

resnet50 = vgg16 = VGG16_Weights = None
